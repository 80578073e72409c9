-- The requests' plan edges as stored now (for plan-hash drift detection).
SELECT r.id AS request_id, f.node_key AS from_key, t.node_key AS to_key
FROM movement_requests r
JOIN plan_edges e ON e.template_version_id = r.template_version_id
JOIN plan_nodes f ON f.id = e.from_node_id
JOIN plan_nodes t ON t.id = e.to_node_id
WHERE r.id = ANY(%(request_ids)s::uuid[])
