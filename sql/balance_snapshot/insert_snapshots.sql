-- One fetcher's rows, appended in one statement. observed_at NULL: the venue did
-- not say, so it is the time the rows are recorded (right after it answered).
INSERT INTO balance_snapshots
    (venue_key, account, asset, amount, observed_at, source, fetcher_key, detail)
SELECT %(venue_key)s, r.account, r.asset, r.amount, COALESCE(r.observed_at, now()),
       %(source)s, %(fetcher_key)s, r.detail
FROM unnest(%(accounts)s::text[], %(assets)s::text[], %(amounts)s::numeric[],
            %(observed)s::timestamptz[], %(details)s::jsonb[])
     AS r(account, asset, amount, observed_at, detail)
