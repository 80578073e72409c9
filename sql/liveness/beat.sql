-- Issue 43 item 7: this process is alive (qtg.services.liveness). An upsert, so a
-- row an operator deleted comes back at the next beat. One statement, its own
-- transaction, never part of a worker's pass.
INSERT INTO runtime_processes AS p (instance_id, host, pid, network_class)
VALUES (%(instance_id)s, %(host)s, %(pid)s, %(network_class)s)
ON CONFLICT (instance_id) DO UPDATE
SET alive_at = now()
