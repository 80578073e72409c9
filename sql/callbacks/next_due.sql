-- When the dispatcher next has work: the earliest pending next_attempt_at.
SELECT min(o.next_attempt_at) AS due
FROM movement_callback_outbox o
JOIN movement_requests r ON r.id = o.request_id
WHERE o.status = 'pending'
  AND r.network_class = %(network_class)s
