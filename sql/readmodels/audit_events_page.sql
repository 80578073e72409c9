-- Newest first; the cursor is the id of the last row of the previous page.
SELECT id, actor, action, object_type, object_id, detail, occurred_at, promoted_at,
       prev_hash, row_hash
FROM audit_events
WHERE (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
  AND (%(object_type)s::text IS NULL OR object_type = %(object_type)s)
  AND (%(object_id)s::text IS NULL OR object_id = %(object_id)s)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s)
  AND (%(action)s::text IS NULL OR action = %(action)s)
ORDER BY id DESC
LIMIT %(limit)s
