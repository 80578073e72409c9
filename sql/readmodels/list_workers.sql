-- Heartbeat rows (one per process and worker) of one network class, each with
-- a stale flag: an instance that claims to be alive (starting/running/backoff)
-- but has not beaten for three of its intervals plus a grace (plus the longest
-- error backoff, 60 s, while in backoff). Crashed and stopped instances are not
-- stale: their status says it. qtg/domain/workers.py folds these into one
-- entry per worker.
SELECT network_class, worker_name, instance_id, host, pid, worker_group, status,
       interval_seconds, started_at, last_beat_at, last_success_at, iterations, items,
       consecutive_errors, last_error, updated_at,
       w.stale_after_seconds,
       extract(epoch FROM now() - coalesce(last_beat_at, started_at, updated_at))::float8
           AS beat_age_seconds,
       status IN ('starting', 'running', 'backoff')
           AND now() - coalesce(last_beat_at, started_at, updated_at)
               > make_interval(secs => w.stale_after_seconds) AS stale
FROM worker_heartbeats,
     LATERAL (SELECT 3 * interval_seconds + %(grace_seconds)s
                     + CASE WHEN status = 'backoff' THEN 60 ELSE 0 END AS stale_after_seconds) w
WHERE network_class = %(network_class)s
ORDER BY worker_group, worker_name, started_at, instance_id
