-- Mint the next nonce above every reservation, released ones too, and at least the chain's
-- count (reserve_run without a released run: a minted run must not meet a released nonce).
INSERT INTO evm_nonce_reservations (chain_id, address, nonce, request_node_id, attempt_no)
SELECT %(chain_id)s, %(address)s,
       GREATEST(%(floor)s::bigint, COALESCE(max(nonce) + 1, 0)), %(request_node_id)s, %(attempt_no)s
FROM evm_nonce_reservations
WHERE chain_id = %(chain_id)s AND address = %(address)s
RETURNING nonce
