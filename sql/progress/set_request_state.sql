UPDATE movement_requests
SET request_state = %(request_state)s
WHERE id = %(request_id)s
