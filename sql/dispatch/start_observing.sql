-- An observe-only node has no side effect: it goes straight to observation, due
-- now. One row of the arrays per node (qtg.db.deferred: a dispatch batch's
-- observe nodes go out as one statement, issue 29); each node is held by the
-- caller's claim.
--
-- The state test is wrapped in IS TRUE (issue 29): the ids' primary key is then
-- the only index that serves it (sql/dispatch/write_ahead.sql says why).
UPDATE movement_request_nodes n
SET node_state = 'OBSERVING',
    attempt_no = o.attempt_no,
    started_at = now(),  -- each attempt its own observation clock (issue 10)
    recover_attempts = 0,
    next_recover_at = NULL,
    next_observe_at = now(),
    error_code = NULL,
    error_detail = NULL
FROM unnest(%(node_ids)s::uuid[], %(attempt_nos)s::integer[]) AS o (node_id, attempt_no)
WHERE n.id = o.node_id
  AND (n.node_state = 'READY') IS TRUE
