-- The watermark of one bucket kind; SKIP LOCKED: a second runtime's pass skips
-- the rollup another one is doing rather than doing it twice.
SELECT bucket, rolled_through, now() AS now
FROM balance_rollup_progress
WHERE bucket = %(bucket)s
FOR UPDATE SKIP LOCKED
