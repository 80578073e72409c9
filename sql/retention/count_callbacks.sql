-- --dry-run: rows delete_callbacks.sql would remove.
SELECT count(*) AS n
FROM movement_callback_outbox
WHERE status IN ('sent', 'dlq')
  AND updated_at < now() - make_interval(secs => %(older_than_seconds)s)
