-- When the dispatcher next has work: the earliest pending next_attempt_at of
-- this class. A walk of movement_callback_outbox_pending_due in its order, the
-- first row whose request (by primary key) is of the class: a min() over a join
-- hash-joined every pending row with every request on stale statistics.
SELECT o.next_attempt_at AS due
FROM movement_callback_outbox o
CROSS JOIN LATERAL (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = o.request_id
      AND (r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
WHERE o.status = 'pending'
ORDER BY o.next_attempt_at
LIMIT 1
