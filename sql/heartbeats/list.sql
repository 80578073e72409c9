-- The heartbeat rows of one network class, by worker name.
SELECT network_class, worker_name, worker_group, status, instance_id, interval_seconds,
       started_at, last_beat_at, last_success_at, iterations, items, consecutive_errors,
       last_error, updated_at
FROM worker_heartbeats
WHERE network_class = %(network_class)s
ORDER BY worker_name
