-- --dry-run: messages delete_notification_messages.sql would remove.
SELECT count(*) AS n
FROM notification_messages
WHERE status IN ('sent', 'dlq')
  AND updated_at < now() - make_interval(secs => %(older_than_seconds)s)
