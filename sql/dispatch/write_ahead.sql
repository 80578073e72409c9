-- DESIGN §4, the write-ahead step: committed before the executor's submit is
-- called, so a crash can never lead to a blind second submit. One statement
-- for a whole dispatch batch (issue 15): row i of the arrays is one node's
-- attempt; every node is held by the caller's claim.
--
-- The state test is wrapped in IS TRUE (issue 29): the ids' primary key is then
-- the only index that serves it. Written plainly, with statistics from before
-- a burst, the planner bitmap-scanned the whole READY index (every node
-- waiting for dispatch) for a batch of 64: 10.5 ms on 10k in flight.
UPDATE movement_request_nodes n
SET node_state = 'SUBMITTING',
    attempt_no = w.attempt_no,
    idempotency_key = w.idempotency_key,
    prepared_action = w.prepared_action,
    started_at = now(),  -- each attempt its own observation clock (issue 10)
    recover_attempts = 0,
    next_recover_at = NULL,
    error_code = NULL,
    error_detail = NULL,
    dispatch_not_before = NULL,  -- a transient wait (issue 24 item 5) ends here
    dispatch_lease = NULL,  -- and the dispatch lease (issue 44 item 3)
    transient_since = NULL,
    transient_tries = 0,
    -- the runtime process that will submit (issue 43 item 7): recovery takes the
    -- node at once once it stops beating (migrations/0057)
    submitting_owner = %(owner)s::text
FROM unnest(%(node_ids)s::uuid[], %(attempt_nos)s::integer[],
            %(idempotency_keys)s::text[], %(prepared_actions)s::jsonb[])
     AS w (node_id, attempt_no, idempotency_key, prepared_action)
WHERE n.id = w.node_id
  AND (n.node_state = 'READY') IS TRUE
