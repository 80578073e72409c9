-- Hold the nodes while their submits run, so recovery (which skips locked
-- rows) can never recover an attempt whose submit is still in flight. A node
-- missing from the result moved since the write-ahead commit (someone else
-- took it, or its attempt changed): it must not be submitted. Locked in id
-- order, so two holders of overlapping sets could never deadlock.
--
-- One primary-key probe per id is the only plan (issue 29): the ids are sorted
-- first, and each node is a LATERAL sub-select (OFFSET 0 keeps the planner
-- from flattening it) whose attempt and state tests are wrapped in IS TRUE so
-- no partial index serves them. Joined the plain way, with statistics from
-- before a burst, the planner bitmap-scanned the whole recoverable index
-- (every UNKNOWN and SUBMITTING node) for a batch of 64. The lock is taken
-- inside the sub-select (FOR ... OF n applies there), in the order the sorted
-- ids are walked: id order, as before.
SELECT n.id, n.in_state_seconds
FROM (SELECT want.id, want.attempt_no
      FROM unnest(%(node_ids)s::uuid[], %(attempt_nos)s::integer[]) AS want(id, attempt_no)
      ORDER BY want.id) AS want
CROSS JOIN LATERAL (
    SELECT n.id,
           extract(epoch FROM clock_timestamp() - coalesce(n.state_entered_at, n.updated_at))
               AS in_state_seconds
    FROM movement_request_nodes n
    WHERE n.id = want.id
      AND (n.attempt_no = want.attempt_no AND n.node_state = 'SUBMITTING') IS TRUE
    OFFSET 0
) n
ORDER BY n.id
FOR NO KEY UPDATE OF n
