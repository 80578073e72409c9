-- Delivered; guarded by the attempt count seen at claim time.
UPDATE notification_messages
SET status = 'sent',
    attempts = attempts + 1,
    sent_at = now(),
    last_error = NULL
WHERE id = %(id)s
  AND status = 'pending'
  AND attempts = %(attempts)s
