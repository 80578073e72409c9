-- A node attempt's reservations with kept signed bytes (its own and its allowance
-- raises', keyed `<node id>:approve…`), whatever their state but released: each is
-- cancelled while live, and decided by what consumed it.
SELECT chain_id, address, nonce, state, tx_hash, request_node_id, attempt_no
FROM evm_nonce_reservations
WHERE split_part(request_node_id, ':', 1) = %(node_id)s::text
  AND attempt_no = %(attempt_no)s
  AND state <> 'released'
  AND tx_hash IS NOT NULL
ORDER BY chain_id, address, nonce
