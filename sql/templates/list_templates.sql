SELECT t.id AS template_id, t.template_key, t.name, t.description, t.created_at, t.updated_at,
       v.id AS template_version_id, v.version, v.graph_hash
FROM movement_templates t
LEFT JOIN template_versions v ON v.template_id = t.id AND v.status = 'ACTIVE'
ORDER BY t.template_key
