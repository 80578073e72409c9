-- Issue 24 item 8: a node attempt that was never submitted (the rest of a nonce
-- lane after a refused or ambiguous submit) gives back its reservation — only
-- one with no signed bytes kept (tx_hash IS NULL): bytes are kept before any
-- broadcast, so a reservation with them may have been broadcast and is never
-- released here.
UPDATE evm_nonce_reservations SET state = 'released', updated_at = now()
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
  AND state = 'reserved' AND tx_hash IS NULL
RETURNING chain_id, address, nonce
