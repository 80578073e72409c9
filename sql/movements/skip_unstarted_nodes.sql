UPDATE movement_request_nodes
SET node_state = 'SKIPPED'
WHERE request_id = %(request_id)s
  AND node_state IN ('BLOCKED', 'READY')
