INSERT INTO movement_request_nodes (request_id, plan_node_id, node_key, node_kind, action_type, node_state)
SELECT %(request_id)s, p.id, p.node_key, p.node_kind, p.action_type, 'BLOCKED'
FROM plan_nodes p
WHERE p.template_version_id = %(template_version_id)s
ORDER BY p.position
