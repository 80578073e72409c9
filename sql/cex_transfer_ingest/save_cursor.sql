INSERT INTO cex_ingest_cursors AS c (venue, since, last_ok_at, last_error)
VALUES (%(venue)s, %(since)s, CASE WHEN %(error)s::text IS NULL THEN now() END, %(error)s)
ON CONFLICT (venue) DO UPDATE
SET since = GREATEST(c.since, EXCLUDED.since),
    last_ok_at = COALESCE(EXCLUDED.last_ok_at, c.last_ok_at),
    last_error = EXCLUDED.last_error,
    updated_at = now()
