-- Each fetcher's last attempt, and when it last succeeded.
SELECT DISTINCT ON (a.fetcher_key)
       a.fetcher_key, a.venue_key, a.source, a.outcome, a.error, a.rows,
       a.started_at, a.finished_at,
       (SELECT max(o.finished_at) FROM balance_fetch_attempts o
        WHERE o.fetcher_key = a.fetcher_key AND o.outcome = 'ok') AS last_ok_at
FROM balance_fetch_attempts a
WHERE (%(venue_key)s::text IS NULL OR a.venue_key = %(venue_key)s)
ORDER BY a.fetcher_key, a.finished_at DESC, a.id DESC
