-- The heartbeat rows of one network class: one per process and worker.
SELECT network_class, worker_name, instance_id, host, pid, worker_group, status,
       interval_seconds, started_at, last_beat_at, last_success_at, iterations, items,
       consecutive_errors, last_error, updated_at
FROM worker_heartbeats
WHERE network_class = %(network_class)s
ORDER BY worker_name, started_at, instance_id
