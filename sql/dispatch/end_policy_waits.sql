-- Issue 44 item 3: a policy hold dropped without a charge (its movement failed,
-- waits or was discarded after the claim held its amount, migrations/0081) gives
-- its room back: the nodes waiting on a policy limit (POLICY_LIMIT) go back into
-- the claim's walk now, to be decided again, instead of after their whole wait.
-- The walk is sql/dispatch/release_due.sql's (movement_request_nodes_dispatch_waiting,
-- only waiting READY nodes, few), bounded; the code test is on the rows it found
-- (in the walk it made the planner trade the index walk for a bitmap and a sort).
-- A leased node (its wait is a lease) and a row someone holds are left.
UPDATE movement_request_nodes n
SET dispatch_not_before = NULL
WHERE n.id IN (
    SELECT w.id
    FROM movement_request_nodes w
    WHERE w.node_state = 'READY'
      AND w.dispatch_not_before IS NOT NULL
    ORDER BY w.dispatch_not_before
    LIMIT (SELECT %(limit)s::integer)
    FOR NO KEY UPDATE SKIP LOCKED
)
  AND (n.error_code = 'POLICY_LIMIT' AND n.dispatch_lease IS NULL) IS TRUE
