-- Hold the nodes while their submits run, so recovery (which skips locked
-- rows) can never recover an attempt whose submit is still in flight. A node
-- missing from the result moved since the write-ahead commit (someone else
-- took it, or its attempt changed): it must not be submitted. Locked in id
-- order, so two holders of overlapping sets could never deadlock.
SELECT n.id,
       extract(epoch FROM clock_timestamp() - coalesce(n.state_entered_at, n.updated_at))
           AS in_state_seconds
FROM movement_request_nodes n
JOIN unnest(%(node_ids)s::uuid[], %(attempt_nos)s::integer[]) AS want(id, attempt_no)
  ON want.id = n.id AND want.attempt_no = n.attempt_no
WHERE n.node_state = 'SUBMITTING'
ORDER BY n.id
FOR NO KEY UPDATE OF n
