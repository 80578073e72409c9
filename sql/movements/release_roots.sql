-- Approval: the nodes with no predecessor become READY — named by the caller
-- (qtg.domain.execution.approval_releases: BLOCKED, no predecessor key), each
-- reached by the request's (request_id, node_key) index.
UPDATE movement_request_nodes n
SET node_state = 'READY'
WHERE n.request_id = %(request_id)s
  AND n.node_key = ANY(%(node_keys)s::text[])
  AND n.node_state = 'BLOCKED'
