-- One PgQueuer job's pickup: its enqueue commit (the 'queued' log row the enqueue
-- statement writes) → its dequeue commit (the job row's xmin while it runs), in ms.
-- Run from inside the job's handler, while the job row still exists. asyncpg: $1 = job id.
SELECT 1000 * extract(epoch FROM pg_xact_commit_timestamp(job.xmin)
                                 - pg_xact_commit_timestamp(queued.xmin)) AS ms
FROM pgqueuer AS job
JOIN pgqueuer_log AS queued ON queued.job_id = job.id AND queued.status = 'queued'
WHERE job.id = $1
