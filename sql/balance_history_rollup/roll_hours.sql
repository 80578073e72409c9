-- Hourly rows of [start, end) from raw snapshots: first/last by (observed_at, id),
-- min, max, count. Re-running a bucket recomputes the same values and leaves the
-- row untouched (the WHERE of DO UPDATE), so the rollup is idempotent.
INSERT INTO balance_history AS h (
    bucket, bucket_start, venue_key, account, asset, first_amount, last_amount,
    min_amount, max_amount, sample_count, first_observed_at, last_observed_at
)
SELECT 'hour', date_trunc('hour', observed_at, 'UTC'), venue_key, account, asset,
       (array_agg(amount ORDER BY observed_at, id))[1],
       (array_agg(amount ORDER BY observed_at DESC, id DESC))[1],
       min(amount), max(amount), count(*), min(observed_at), max(observed_at)
FROM balance_snapshots
WHERE observed_at >= %(start)s AND observed_at < %(end)s
GROUP BY 2, 3, 4, 5
ON CONFLICT (bucket, venue_key, account, asset, bucket_start) DO UPDATE
SET first_amount = EXCLUDED.first_amount,
    last_amount = EXCLUDED.last_amount,
    min_amount = EXCLUDED.min_amount,
    max_amount = EXCLUDED.max_amount,
    sample_count = EXCLUDED.sample_count,
    first_observed_at = EXCLUDED.first_observed_at,
    last_observed_at = EXCLUDED.last_observed_at,
    rolled_at = now()
WHERE (h.first_amount, h.last_amount, h.min_amount, h.max_amount, h.sample_count,
       h.first_observed_at, h.last_observed_at)
      IS DISTINCT FROM
      (EXCLUDED.first_amount, EXCLUDED.last_amount, EXCLUDED.min_amount, EXCLUDED.max_amount,
       EXCLUDED.sample_count, EXCLUDED.first_observed_at, EXCLUDED.last_observed_at)
