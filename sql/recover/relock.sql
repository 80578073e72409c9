-- Issue 44 item 3, the short second transaction: the request again (waiting: every
-- holder of a request holds it for a few statements), still EXECUTING, then the
-- node, only while the lease still holds this call's token in the same attempt
-- and state — SKIP LOCKED: a node someone holds now is being moved on by them,
-- and this answer is discarded. Lock order as everywhere: request, then node.
-- A CTE per row, each by primary key.
WITH r AS (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = %(request_id)s
      AND r.request_state = 'EXECUTING'
      AND r.network_class = %(network_class)s
    FOR NO KEY UPDATE
)
SELECT n.id
FROM movement_request_nodes n
WHERE n.id = %(node_id)s
  AND n.request_id = (SELECT id FROM r)
  AND n.recover_lease = %(lease)s
  AND n.attempt_no = %(attempt_no)s
  AND n.node_state = %(node_state)s
FOR NO KEY UPDATE OF n SKIP LOCKED
