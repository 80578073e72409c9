-- One bounded batch of notification messages that are done with (sent or dlq,
-- untouched for the retention period), with their delivery rows (which point at
-- them). A held delivery has no message and is never touched.
WITH doomed AS (
    SELECT id
    FROM notification_messages
    WHERE id > %(after_id)s
      AND status IN ('sent', 'dlq')
      AND updated_at < now() - make_interval(secs => %(older_than_seconds)s)
    ORDER BY id
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), deliveries AS (
    DELETE FROM notification_deliveries d USING doomed WHERE d.message_id = doomed.id
    RETURNING d.notification_id
), deleted AS (
    DELETE FROM notification_messages m USING doomed WHERE m.id = doomed.id RETURNING m.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id,
       (SELECT count(*) FROM deliveries) AS deliveries
FROM deleted
