INSERT INTO balance_fetch_attempts
    (fetcher_key, venue_key, source, outcome, error, rows, started_at)
VALUES (%(fetcher_key)s, %(venue_key)s, %(source)s, %(outcome)s, %(error)s, %(rows)s,
        %(started_at)s)
