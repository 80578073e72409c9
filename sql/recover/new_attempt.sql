-- recover() proved that the attempt never happened: back to READY for a new
-- attempt (attempt_no + 1 and a new idempotency key at the next write-ahead).
-- Beyond the reference, which ends the node FAILED (issue 10); bounded by
-- MG_NODE_MAX_ATTEMPTS. The reason stays on the node until then.
UPDATE movement_request_nodes
SET node_state = 'READY',
    error_code = %(error_code)s,
    error_detail = %(error_detail)s,
    started_at = NULL,
    next_observe_at = NULL,
    recover_attempts = 0,
    next_recover_at = NULL
WHERE id = %(node_id)s
  AND node_state IN ('SUBMITTING', 'UNKNOWN')
