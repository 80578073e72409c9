INSERT INTO plan_edges (template_version_id, from_node_id, to_node_id)
SELECT %(template_version_id)s, f.id, t.id
FROM jsonb_to_recordset(%(edges)s) AS e(from_key text, to_key text)
JOIN plan_nodes f ON f.template_version_id = %(template_version_id)s AND f.node_key = e.from_key
JOIN plan_nodes t ON t.template_version_id = %(template_version_id)s AND t.node_key = e.to_key
