UPDATE movement_requests
SET request_state = 'APPROVED', approved_by = %(actor)s, decided_by = %(actor)s
WHERE id = %(request_id)s
