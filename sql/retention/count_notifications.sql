-- --dry-run: notifications delete_notifications.sql would remove once their
-- messages are gone (resolved long enough; deliveries of old messages count as gone).
SELECT count(*) AS n
FROM notifications n
WHERE n.routed_at IS NOT NULL
  AND n.resolved_at < now() - make_interval(secs => %(older_than_seconds)s)
  AND NOT EXISTS (
      SELECT 1 FROM notification_deliveries d
      LEFT JOIN notification_messages m ON m.id = d.message_id
      WHERE d.notification_id = n.id
        AND NOT (m.status IN ('sent', 'dlq')
                 AND m.updated_at < now() - make_interval(secs => %(older_than_seconds)s)))
