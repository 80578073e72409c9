-- The latest snapshot per venue, account and asset (GET /v3/balances), with the
-- database's clock to judge staleness against.
SELECT DISTINCT ON (venue_key, account, asset)
       id, venue_key, account, asset, amount, observed_at, recorded_at, source,
       fetcher_key, detail, now() AS as_of
FROM balance_snapshots
WHERE (%(venue_key)s::text IS NULL OR venue_key = %(venue_key)s)
  AND (%(account)s::text IS NULL OR account = %(account)s)
  AND (%(asset)s::text IS NULL OR asset = %(asset)s)
ORDER BY venue_key, account, asset, observed_at DESC, id DESC
