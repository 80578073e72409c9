-- Heartbeats per process (issue 17 item 5).
--
-- Rows were keyed by (network_class, worker_name): every process running a
-- worker wrote the same row, so a live instance overwrote a dead one's
-- `crashed` and hid it. Now each process (host, pid, instance_id) owns its
-- row for each worker it runs; the per-worker view (/v3/workers) is derived
-- from them (qtg/domain/workers.py). instance_id is unique per process start,
-- so a reused pid is a new row, not a resurrection of an old one.
ALTER TABLE worker_heartbeats
    ADD COLUMN host text,
    ADD COLUMN pid integer;

-- Rows written before this migration carry instance_id 'host:pid'.
UPDATE worker_heartbeats
SET instance_id = coalesce(instance_id, 'unknown'),
    host = coalesce(nullif(split_part(coalesce(instance_id, ''), ':', 1), ''), 'unknown'),
    pid = CASE WHEN split_part(coalesce(instance_id, ''), ':', 2) ~ '^[0-9]{1,9}$'
               THEN split_part(instance_id, ':', 2)::integer ELSE 0 END;

ALTER TABLE worker_heartbeats
    ALTER COLUMN instance_id SET NOT NULL,
    ALTER COLUMN host SET NOT NULL,
    ALTER COLUMN pid SET NOT NULL,
    ADD CONSTRAINT worker_heartbeats_pid_check CHECK (pid >= 0),
    DROP CONSTRAINT worker_heartbeats_pkey,
    ADD PRIMARY KEY (network_class, worker_name, instance_id);
