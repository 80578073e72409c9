-- Issue 44 item 2: the page of sql/node_attention/raise_observe_failing.sql is
-- resolved once its node answers again (observe_failing_since NULL) or is no
-- longer observed (it moved on: COMPLETED, FAILED, UNKNOWN, a new attempt);
-- a node that leaves observation while failing has its run of failures
-- forgotten too, so a later attempt starts its count afresh. Only the node
-- row is locked, SKIP LOCKED. A walk of movement_request_nodes_observe_failing.
-- A SUBMITTING node is left for later: any UPDATE moves its updated_at, which
-- is where recovery's SUBMITTING grace counts from.
WITH done AS (
    SELECT n.id
    FROM movement_request_nodes n
    WHERE (n.observe_failing_since IS NOT NULL OR n.observe_paged_at IS NOT NULL)
      AND ((n.observe_paged_at IS NOT NULL AND n.observe_failing_since IS NULL)
           OR n.node_state NOT IN ('SUBMITTED', 'OBSERVING', 'SUBMITTING')) IS TRUE
    ORDER BY n.observe_failing_since, n.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF n SKIP LOCKED
), cleared AS (
    UPDATE movement_request_nodes n
    SET observe_paged_at = NULL,
        observe_failing_since = CASE WHEN n.node_state IN ('SUBMITTED', 'OBSERVING')
                                     THEN n.observe_failing_since END,
        observe_errors = CASE WHEN n.node_state IN ('SUBMITTED', 'OBSERVING')
                              THEN n.observe_errors ELSE 0 END
    FROM done
    WHERE n.id = done.id
    RETURNING n.id
)
SELECT c.id, qtg_resolve_notification('observe_failing:' || c.id) AS resolved
FROM cleared c
