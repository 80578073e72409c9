-- The evidence came (our receipt, the consuming transaction), or the nonce is free again:
-- forget the missing-evidence mark and resolve its page, if one was raised; on the
-- judging node attempt's reservation only (issue 44 item 5).
WITH cleared AS (
    UPDATE evm_nonce_reservations SET not_landed_seen_at = NULL
    WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
      AND not_landed_seen_at IS NOT NULL
      AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
      AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
    RETURNING chain_id, address, nonce
)
SELECT qtg_resolve_notification(
           'evm_evidence:' || chain_id::text || ':' || address || ':' || nonce::text)
FROM cleared
