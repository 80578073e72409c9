-- An operator says the condition is handled: its next occurrence pages again.
UPDATE notifications
SET resolved_at = clock_timestamp()
WHERE id = %(id)s
  AND resolved_at IS NULL
RETURNING id
