-- The cursor of every venue asked for (a venue seen for the first time has none),
-- held no earlier than its oldest transfer still pending, so a pending transfer
-- is asked for again until the venue reports it final.
SELECT v.venue,
       LEAST(c.since, (SELECT min(t.occurred_at) FROM cex_transfers t
                       WHERE t.venue = v.venue AND t.status = 'pending')) AS since,
       now() AS now
FROM unnest(%(venues)s::text[]) AS v(venue)
LEFT JOIN cex_ingest_cursors c ON c.venue = v.venue
