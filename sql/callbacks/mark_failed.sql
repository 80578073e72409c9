-- A failed attempt: the new attempt count, status (pending, or dlq once the
-- attempts are used up) and backoff delay are computed by
-- qtg.services.callbacks.failure_outcome. Guarded like mark_sent.
UPDATE movement_callback_outbox
SET status = %(status)s,
    attempts = %(new_attempts)s,
    next_attempt_at = now() + make_interval(secs => %(delay_seconds)s),
    last_status_code = %(status_code)s,
    last_error = %(error)s
WHERE id = %(id)s
  AND status = 'pending'
  AND attempts = %(attempts)s
