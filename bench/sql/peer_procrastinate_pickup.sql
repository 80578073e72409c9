-- Procrastinate jobs' pickups: the 'deferred' event (written by the insert's trigger,
-- in the defer transaction) → the 'started' event (written by the fetch_job
-- transaction), commit time to commit time, in ms.
SELECT 1000 * extract(epoch FROM pg_xact_commit_timestamp(started.xmin)
                                 - pg_xact_commit_timestamp(deferred.xmin)) AS ms
FROM procrastinate_events AS deferred
JOIN procrastinate_events AS started
  ON started.job_id = deferred.job_id AND started.type = 'started'
WHERE deferred.type = 'deferred' AND deferred.job_id = ANY(%(ids)s)
ORDER BY deferred.job_id
