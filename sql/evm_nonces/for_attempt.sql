-- The live reservation of a node attempt: prepare() reuses it (idempotent prepare),
-- recover() reads its write-ahead tx_hash when the SUBMITTED commit never happened.
SELECT chain_id, address, nonce, state, tx_hash FROM evm_nonce_reservations
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s AND state <> 'released'
