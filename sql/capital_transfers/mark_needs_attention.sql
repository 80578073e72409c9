-- The movement could not be created (e.g. its template was retired): a person decides.
UPDATE capital_transfer_requests
SET status = 'needs_attention',
    last_error = %(error)s,
    followed_up_at = now()
WHERE id = %(id)s
  AND request_id IS NULL
