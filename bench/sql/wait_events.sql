-- qtg-bench: what the runtime's backends are doing right now.
SELECT state, coalesce(wait_event_type, 'CPU') AS wait_type, coalesce(wait_event, '-') AS wait_event
FROM pg_stat_activity
WHERE datname = %(db)s
  AND application_name LIKE %(app)s
