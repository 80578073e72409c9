-- Messages this route has used in its current rate window.
--
-- The route and the window are read through sub-selects, so the plan is costed
-- alike with and without their values and the connection keeps one (as the
-- LIMITs of the claims: sql/dispatch/claim_batch.sql says why); with fresh
-- statistics the plan costed for the values always looked cheaper.
SELECT count(*) AS used
FROM notification_messages
WHERE route = (SELECT %(route)s::text)
  AND created_at > now() - make_interval(secs => (SELECT %(window_seconds)s::float8))
