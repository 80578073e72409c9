-- Human decisions wait for a worker that holds the request (they are rare and short).
SELECT r.*
FROM movement_requests r
WHERE r.id = %(request_id)s
FOR NO KEY UPDATE
