-- The settle sweep's lock of one listed request: SKIP LOCKED (a worker that
-- holds it settles it itself), and still EXECUTING. The state test is wrapped
-- in IS TRUE (issue 44 item 4): by primary key only; a generic plan made while
-- the table was empty walked the (network_class, request_state, created_at)
-- index, filtering every request by id.
SELECT r.id
FROM movement_requests r
WHERE r.id = %(request_id)s
  AND (r.request_state = 'EXECUTING') IS TRUE
FOR NO KEY UPDATE OF r SKIP LOCKED
