-- Approval: nodes with no predecessor become READY.
UPDATE movement_request_nodes n
SET node_state = 'READY'
WHERE n.request_id = %(request_id)s
  AND n.node_state = 'BLOCKED'
  AND NOT EXISTS (SELECT 1 FROM plan_edges e WHERE e.to_node_id = n.plan_node_id)
