-- Seed (or re-arm) one heartbeat row per resolved worker of this network class
-- at start-up. Counters are kept: they are cumulative across restarts and
-- across processes sharing the database.
INSERT INTO worker_heartbeats AS h
    (network_class, worker_name, worker_group, status, instance_id, interval_seconds,
     started_at, updated_at)
SELECT %(network_class)s, w.name, w.grp, 'starting', %(instance_id)s, w.interval_seconds,
       now(), now()
FROM unnest(%(names)s::text[], %(groups)s::text[], %(intervals)s::double precision[])
     AS w(name, grp, interval_seconds)
ON CONFLICT (network_class, worker_name) DO UPDATE
SET worker_group = EXCLUDED.worker_group,
    status = 'starting',
    instance_id = EXCLUDED.instance_id,
    interval_seconds = EXCLUDED.interval_seconds,
    started_at = EXCLUDED.started_at,
    consecutive_errors = 0,
    updated_at = now()
