-- A node ends up FAILED or UNKNOWN, with the reason.
UPDATE movement_request_nodes
SET node_state = %(node_state)s, error_code = %(error_code)s, error_detail = %(error_detail)s,
    next_observe_at = NULL
WHERE id = %(node_id)s
