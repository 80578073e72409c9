-- The live reservations of a node attempt with kept signed bytes (reserved or broadcast,
-- tx_hash set): what it signed that could still be mined. Its allowance raises are keyed
-- `<node id>:approve…`.
SELECT chain_id, address, nonce, state, tx_hash, request_node_id
FROM evm_nonce_reservations
WHERE split_part(request_node_id, ':', 1) = %(node_id)s::text
  AND attempt_no = %(attempt_no)s
  AND state IN ('reserved', 'broadcast')
  AND tx_hash IS NOT NULL
ORDER BY chain_id, address, nonce
