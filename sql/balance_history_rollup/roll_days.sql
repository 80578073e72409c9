-- Daily rows of [start, end) from the hourly rows (not raw snapshots, which
-- retention may have dropped): first of the first hour, last of the last hour,
-- min of mins, max of maxes, sum of counts. Idempotent like roll_hours.
INSERT INTO balance_history AS h (
    bucket, bucket_start, venue_key, account, asset, first_amount, last_amount,
    min_amount, max_amount, sample_count, first_observed_at, last_observed_at
)
SELECT 'day', date_trunc('day', bucket_start, 'UTC'), venue_key, account, asset,
       (array_agg(first_amount ORDER BY bucket_start))[1],
       (array_agg(last_amount ORDER BY bucket_start DESC))[1],
       min(min_amount), max(max_amount), sum(sample_count),
       min(first_observed_at), max(last_observed_at)
FROM balance_history
WHERE bucket = 'hour' AND bucket_start >= %(start)s AND bucket_start < %(end)s
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
