-- Heartbeat rows of processes that stopped writing (every network class): a row
-- untouched for the retention period and for ten of its own intervals. A live
-- process touches its rows every interval, so only dead ones go. Small table:
-- one statement.
DELETE FROM worker_heartbeats
WHERE updated_at < now() - make_interval(
        secs => greatest(%(older_than_seconds)s::double precision, 10 * interval_seconds))
