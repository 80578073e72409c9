-- When the dispatcher next has work: the earliest pending next_attempt_at.
SELECT min(next_attempt_at) AS due
FROM movement_callback_outbox
WHERE status = 'pending'
