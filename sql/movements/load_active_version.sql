SELECT t.id AS template_id, t.template_key,
       v.id AS template_version_id, v.version, v.graph
FROM movement_templates t
JOIN template_versions v ON v.template_id = t.id AND v.status = 'ACTIVE'
WHERE t.template_key = %(template_key)s
