-- The chain decided a resolution that waited for it: applied now, with what it showed.
UPDATE movement_node_resolutions SET applied_at = now(), proof = %(proof)s
WHERE id = %(id)s AND applied_at IS NULL
