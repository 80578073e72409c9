-- One bounded batch of movement_callback_outbox rows that are done with: sent,
-- or dead-lettered (dlq), and untouched for the retention period. Pending rows
-- are never touched, whatever their age.
WITH doomed AS (
    SELECT id
    FROM movement_callback_outbox
    WHERE id > %(after_id)s
      AND status IN ('sent', 'dlq')
      AND updated_at < now() - make_interval(secs => %(older_than_seconds)s)
    ORDER BY id
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM movement_callback_outbox c USING doomed WHERE c.id = doomed.id RETURNING c.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id FROM deleted
