-- Before moving the request on after a failed submit (in its own transaction,
-- holding nothing else; see dispatch.py on lock order): every writer of a
-- request's state holds its row, so none decides from a stale view of the nodes.
SELECT id
FROM movement_requests
WHERE id = %(request_id)s
FOR NO KEY UPDATE
