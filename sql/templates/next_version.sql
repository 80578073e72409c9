SELECT coalesce(max(version), 0) + 1 AS version
FROM template_versions
WHERE template_id = %(template_id)s
