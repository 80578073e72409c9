-- Every version of one template, newest first (NULL template: it does not exist).
SELECT t.id AS template_id, v.id AS template_version_id, v.version, v.status, v.graph,
       v.graph_hash, v.risk_controls, v.created_by, v.created_at
FROM movement_templates t
LEFT JOIN template_versions v ON v.template_id = t.id
WHERE t.template_key = %(template_key)s
ORDER BY v.version DESC
