-- A judgement contradicted an earlier "not landed" finding (our receipt, or the nonce free);
-- on the judging node attempt's reservation only (issue 44 item 5).
UPDATE evm_nonce_reservations SET not_landed_seen_at = NULL
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND not_landed_seen_at IS NOT NULL
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
