-- Whether a template has an active version to create the movement from.
SELECT EXISTS (
    SELECT 1
    FROM movement_templates t
    JOIN template_versions v ON v.template_id = t.id AND v.status = 'ACTIVE'
    WHERE t.template_key = %(template_key)s
) AS active
