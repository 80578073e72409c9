-- Issue 24 item 8 (and a submit that answers RetryLater): written-ahead nodes
-- whose submit was never called (the rest of a nonce lane after a rejected or
-- ambiguous submit), or refused before any side effect in a way that may
-- clear by itself, go back to READY; their next dispatch is a new attempt
-- (attempt_no + 1, a new idempotency key), not before %(wait_seconds)s (0: at
-- once). The caller holds the SUBMITTING rows (sql/dispatch/lock_submitting.sql).
--
-- The state test is wrapped in IS TRUE (issue 29): the ids' primary key is then
-- the only index that serves it. Written plainly, with statistics from before a
-- burst, the planner ANDed the primary key's bitmap with one of the whole
-- recoverable index (every UNKNOWN and SUBMITTING node), growing with the
-- backlog.
UPDATE movement_request_nodes n
SET node_state = 'READY',
    error_code = %(error_code)s,
    error_detail = %(error_detail)s,
    started_at = NULL,
    unsent_attempts = unsent_attempts + 1,  -- no attempt at the money (migration 0027)
    dispatch_not_before = CASE WHEN %(wait_seconds)s > 0
                               THEN clock_timestamp() + make_interval(secs => %(wait_seconds)s)
                          END
WHERE n.id = ANY(%(node_ids)s::uuid[])
  AND (n.node_state = 'SUBMITTING') IS TRUE
RETURNING n.id
