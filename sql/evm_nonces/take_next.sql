-- Mint the next nonce: above every reservation, released ones too, and at least the
-- chain's count. Released ones too: a release does not take the account lock, so one
-- committed between this transaction's take_released and this statement would leave
-- a released row where "above every live one" mints (a duplicate nonce); minted above
-- it, the released nonce is a gap the next reservation or the reaper's gap fill takes.
-- reserve_run mints its runs here as well: a run must not meet a released nonce.
INSERT INTO evm_nonce_reservations (chain_id, address, nonce, request_node_id, attempt_no)
SELECT %(chain_id)s, %(address)s,
       GREATEST(%(floor)s::bigint, COALESCE(max(nonce) + 1, 0)), %(request_node_id)s, %(attempt_no)s
FROM evm_nonce_reservations
WHERE chain_id = %(chain_id)s AND address = %(address)s
RETURNING nonce
