-- Reject / cancel: a human decision that ends the request.
UPDATE movement_requests
SET request_state = %(request_state)s, decided_by = %(actor)s
WHERE id = %(request_id)s
