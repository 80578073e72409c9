UPDATE template_versions
SET status = 'RETIRED'
WHERE template_id = %(template_id)s
  AND status = 'ACTIVE'
