-- Fetch attempts are kept as long as raw snapshots, deleted in bounded batches too.
WITH doomed AS (
    SELECT id
    FROM balance_fetch_attempts
    WHERE finished_at < now() - make_interval(secs => %(retention_seconds)s)
    ORDER BY finished_at, id
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM balance_fetch_attempts a
USING doomed
WHERE a.id = doomed.id
