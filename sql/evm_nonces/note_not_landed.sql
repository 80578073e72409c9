-- A judgement found the nonce consumed at the trusted depth with no receipt of ours
-- (issue 43: no evidence yet, never proof): remember when first, and say how long ago
-- (past MG_EVM_EVIDENCE_ATTENTION_SECONDS the wait pages). Only on the reservation of
-- the node attempt that judged (issue 44 item 5).
UPDATE evm_nonce_reservations
SET not_landed_seen_at = coalesce(not_landed_seen_at, now())
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
RETURNING extract(epoch FROM now() - not_landed_seen_at)::float8 AS seen_for
