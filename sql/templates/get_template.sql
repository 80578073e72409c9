SELECT t.id AS template_id, t.template_key, t.name, t.description, t.created_at, t.updated_at,
       v.id AS template_version_id, v.version, v.graph, v.graph_hash, v.risk_controls,
       v.created_by AS version_created_by, v.created_at AS version_created_at
FROM movement_templates t
LEFT JOIN template_versions v ON v.template_id = t.id AND v.status = 'ACTIVE'
WHERE t.template_key = %(template_key)s
