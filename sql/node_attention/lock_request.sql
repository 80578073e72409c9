-- The settle sweep's lock of one listed request: SKIP LOCKED (a worker that
-- holds it settles it itself), and still EXECUTING.
SELECT r.id
FROM movement_requests r
WHERE r.id = %(request_id)s
  AND r.request_state = 'EXECUTING'
FOR NO KEY UPDATE OF r SKIP LOCKED
