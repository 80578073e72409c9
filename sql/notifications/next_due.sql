-- When the dispatcher next has work: a pending message's next attempt (a
-- retry, or a lease running out); for a configured route with held
-- deliveries, the moment its rate window frees a slot (now if it has one);
-- an unrouted notification (now).
-- The routes' array and the window are read through sub-selects, so the plan
-- is costed alike with and without their values and the connection keeps one
-- (as the LIMITs of the claims: sql/dispatch/claim_batch.sql says why).
SELECT least(
    (SELECT min(next_attempt_at) FROM notification_messages WHERE status = 'pending'),
    (SELECT min(coalesce(
                (SELECT min(m.created_at) FROM notification_messages m
                 WHERE m.route = h.route
                   AND m.created_at
                       > now() - make_interval(secs => (SELECT %(window_seconds)s::float8))
                 HAVING count(*) >= %(limit)s)
                + make_interval(secs => %(window_seconds)s),
                now()))
     FROM (SELECT DISTINCT route FROM notification_deliveries
           WHERE message_id IS NULL
             AND route = ANY(ARRAY(SELECT unnest(%(routes)s::text[])))) AS h),
    (SELECT CASE WHEN EXISTS (SELECT 1 FROM notifications WHERE routed_at IS NULL)
                 THEN now() END)
) AS due
