-- The live reservation of a node attempt, if prepare() already took one (idempotent prepare).
SELECT nonce, state, tx_hash FROM evm_nonce_reservations
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s AND state <> 'released'
