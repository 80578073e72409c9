-- GET /v3/balances/history: newest bucket first, keyset-paginated on
-- (bucket_start, venue_key, account, asset), all descending.
SELECT bucket, bucket_start, venue_key, account, asset, first_amount, last_amount,
       min_amount, max_amount, sample_count, first_observed_at, last_observed_at
FROM balance_history
WHERE bucket = %(bucket)s
  AND (%(venue_key)s::text IS NULL OR venue_key = %(venue_key)s)
  AND (%(account)s::text IS NULL OR account = %(account)s)
  AND (%(asset)s::text IS NULL OR asset = %(asset)s)
  AND (%(since)s::timestamptz IS NULL OR bucket_start >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR bucket_start < %(until)s)
  AND (%(after_start)s::timestamptz IS NULL
       OR (bucket_start, venue_key, account, asset)
          < (%(after_start)s, %(after_venue)s::text, %(after_account)s::text,
             %(after_asset)s::text))
ORDER BY bucket_start DESC, venue_key DESC, account DESC, asset DESC
LIMIT %(limit)s
