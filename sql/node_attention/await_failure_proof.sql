-- Operators resolved the node FAILED while its signed bytes could still be mined: it
-- stays undecided (SUBMITTING past its grace becomes UNKNOWN) and says why; recovery
-- leaves FAILURE_NOT_PROVEN alone (sql/recover/*.sql), evm_nonce_reaper's cancel step
-- decides it from the chain (qtg/services/evm_cancels.py).
UPDATE movement_request_nodes
SET node_state = 'UNKNOWN', error_code = 'FAILURE_NOT_PROVEN', error_detail = %(detail)s
WHERE id = %(node_id)s AND node_state IN ('UNKNOWN', 'SUBMITTING')
RETURNING id
