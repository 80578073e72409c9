-- BLOCKED -> READY for successors whose predecessors are all done.
UPDATE movement_request_nodes
SET node_state = 'READY'
WHERE request_id = %(request_id)s
  AND node_key = ANY(%(node_keys)s)
  AND node_state = 'BLOCKED'
