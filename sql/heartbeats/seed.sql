-- Seed one heartbeat row per resolved worker of this process at start-up.
-- The instance id is new for every process start, so this inserts; the
-- upsert only matters if a process seeds twice.
INSERT INTO worker_heartbeats AS h
    (network_class, worker_name, instance_id, host, pid, worker_group, status,
     interval_seconds, started_at, updated_at)
SELECT %(network_class)s, w.name, %(instance_id)s, %(host)s, %(pid)s, w.grp, 'starting',
       w.interval_seconds, now(), now()
FROM unnest(%(names)s::text[], %(groups)s::text[], %(intervals)s::double precision[])
     AS w(name, grp, interval_seconds)
ON CONFLICT (network_class, worker_name, instance_id) DO UPDATE
SET worker_group = EXCLUDED.worker_group,
    status = 'starting',
    interval_seconds = EXCLUDED.interval_seconds,
    started_at = EXCLUDED.started_at,
    consecutive_errors = 0,
    updated_at = now()
