-- --dry-run: rows delete_heartbeats.sql would remove.
SELECT count(*) AS n
FROM worker_heartbeats
WHERE updated_at < now() - make_interval(
        secs => greatest(%(older_than_seconds)s::double precision, 10 * interval_seconds))
