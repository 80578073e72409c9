-- One bounded retention batch. With history on, a raw row goes only once its
-- hour is rolled up (before balance_rollup_progress.rolled_through), so history
-- never loses a sample it has not counted yet. SKIP LOCKED: two runtimes'
-- retention passes take disjoint batches.
WITH doomed AS (
    SELECT id
    FROM balance_snapshots
    WHERE observed_at < now() - make_interval(secs => %(retention_seconds)s)
      AND (NOT %(history_enabled)s
           OR observed_at < COALESCE(
               (SELECT rolled_through FROM balance_rollup_progress WHERE bucket = 'hour'),
               '-infinity'::timestamptz))
    ORDER BY observed_at, id
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM balance_snapshots s
USING doomed
WHERE s.id = doomed.id
