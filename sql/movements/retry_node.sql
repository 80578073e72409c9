UPDATE movement_request_nodes
SET node_state = 'READY', error_code = NULL, error_detail = NULL, next_observe_at = NULL
WHERE request_id = %(request_id)s
  AND node_key = %(node_key)s
  AND node_state = 'FAILED'
RETURNING id
