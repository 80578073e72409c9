-- A 2xx answer: delivered. Guarded by the attempt count seen at claim time,
-- so an outcome can only be recorded once per attempt.
UPDATE movement_callback_outbox
SET status = 'sent',
    attempts = attempts + 1,
    sent_at = now(),
    last_status_code = %(status_code)s,
    last_error = NULL
WHERE id = %(id)s
  AND status = 'pending'
  AND attempts = %(attempts)s
