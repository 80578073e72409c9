-- Create the template or refresh its name/description; locks the row so that
-- concurrent version creations for one template are numbered one after another.
INSERT INTO movement_templates (template_key, name, description)
VALUES (%(template_key)s, %(name)s, %(description)s)
ON CONFLICT (template_key) DO UPDATE
    SET name = EXCLUDED.name,
        description = EXCLUDED.description,
        updated_at = now()
RETURNING id, (xmax = 0) AS created
