-- The plan as stored now (for plan-hash drift detection).
SELECT f.node_key AS from_key, t.node_key AS to_key
FROM plan_edges e
JOIN plan_nodes f ON f.id = e.from_node_id
JOIN plan_nodes t ON t.id = e.to_node_id
WHERE e.template_version_id = %(template_version_id)s
