SELECT r.*, t.template_key, v.version AS template_version
FROM movement_requests r
JOIN movement_templates t ON t.id = r.template_id
JOIN template_versions v ON v.id = r.template_version_id
WHERE r.id = %(request_id)s
