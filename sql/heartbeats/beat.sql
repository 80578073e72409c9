-- One heartbeat write of one process's worker: counters are increments since
-- this process's last write, added to its own row (one row per process and
-- worker; the per-worker view sums them).
-- Upsert, so a row deleted by an operator comes back on the next beat.
INSERT INTO worker_heartbeats AS h
    (network_class, worker_name, instance_id, host, pid, worker_group, status,
     interval_seconds, started_at, last_beat_at, last_success_at, iterations, items,
     consecutive_errors, last_error, updated_at)
VALUES
    (%(network_class)s, %(worker_name)s, %(instance_id)s, %(host)s, %(pid)s, %(worker_group)s,
     %(status)s, %(interval_seconds)s, now(), now(), %(last_success_at)s, %(iterations)s,
     %(items)s, %(consecutive_errors)s, %(last_error)s, now())
ON CONFLICT (network_class, worker_name, instance_id) DO UPDATE
SET status = EXCLUDED.status,
    last_beat_at = now(),
    last_success_at = greatest(h.last_success_at, EXCLUDED.last_success_at),
    iterations = h.iterations + EXCLUDED.iterations,
    items = h.items + EXCLUDED.items,
    consecutive_errors = EXCLUDED.consecutive_errors,
    last_error = coalesce(EXCLUDED.last_error, h.last_error),
    updated_at = now()
