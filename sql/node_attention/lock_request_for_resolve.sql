-- An operator's resolution waits for a worker that holds the request, as every
-- human decision does (they are rare and short; sql/movements/lock_request.sql).
SELECT r.id, r.request_state, r.created_by
FROM movement_requests r
WHERE r.id = %(request_id)s
FOR NO KEY UPDATE
