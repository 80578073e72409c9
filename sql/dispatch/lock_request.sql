-- Before deciding the request's state after a failed submit: every writer of a
-- request's state holds its row, so none decides from a stale view of the nodes.
SELECT id
FROM movement_requests
WHERE id = %(request_id)s
FOR UPDATE
