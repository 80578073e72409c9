-- A judgement found the nonce used by a transaction that is not ours: remember when first,
-- and say how long ago that was (a new attempt needs two findings this far apart). Only on
-- the reservation of the node attempt that judged (issue 44 item 5).
UPDATE evm_nonce_reservations
SET not_landed_seen_at = coalesce(not_landed_seen_at, now())
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
RETURNING extract(epoch FROM now() - not_landed_seen_at)::float8 AS seen_for
