-- Forget the rows of processes that stopped writing long ago (every start adds
-- one set of rows, keyed by its instance id, so without this the table grows
-- by one set per restart for ever). A row is old when nothing has touched it
-- for the retention period and for ten of its own intervals, so a worker that
-- beats once a day is never pruned while its process lives.
DELETE FROM worker_heartbeats
WHERE network_class = %(network_class)s
  AND instance_id <> %(instance_id)s
  AND updated_at < now() - make_interval(
        secs => greatest(%(retention_seconds)s::double precision, 10 * interval_seconds))
