SELECT t.*, r.request_state
FROM capital_transfer_requests t
LEFT JOIN movement_requests r ON r.id = t.request_id
WHERE t.id = %(id)s
