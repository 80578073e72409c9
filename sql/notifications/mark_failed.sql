-- A failed attempt: attempts, status (pending or dlq) and backoff come from
-- qtg.services.callbacks.failure_outcome (the callbacks' schedule). Guarded like mark_sent.
UPDATE notification_messages
SET status = %(status)s,
    attempts = %(new_attempts)s,
    next_attempt_at = now() + make_interval(secs => %(delay_seconds)s),
    last_error = %(error)s
WHERE id = %(id)s
  AND status = 'pending'
  AND attempts = %(attempts)s
