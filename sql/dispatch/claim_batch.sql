-- Issue 15, the batch claim, made fair (issue 25 item 6): the oldest READY
-- node (the first to become READY: state_entered_at, then id; issue 44 item 5)
-- of each of up to %(limit)s ready requests, oldest request first
-- (movement_requests.created_at ASC), locked with its request in ONE
-- statement: FOR NO KEY UPDATE of node and request (see
-- qtg/services/dispatch.py on why NO KEY UPDATE). One node per request per
-- batch, picked here: a 200-node fan-out takes one slot of a batch, like a
-- 1-node movement beside it, so every ready request gets its turn at each pass
-- instead of waiting behind the wide one's 200 nodes (the batch kept only the
-- first row per request anyway; the others used to fill the claim, locked,
-- for nothing).
--
-- A bounded walk, whatever the planner's statistics say (issue 29):
-- `heads` is a skip scan of the partial index movement_request_nodes_ready_now
-- (request_created_at, request_id, state_entered_at, id) WHERE READY, not manual and not waiting
-- out a transient fault (migrations/0021, 0019: a node with a
-- dispatch_not_before is not claimed; sql/dispatch/release_due.sql clears it
-- when due): each step is one index probe for the next (created_at,
-- request) pair, and the recursion runs only as far as the outer LIMIT pulls
-- it. n.request_created_at is the node's copy of its request's immutable
-- created_at (migrations/0017). Each head's request is a LATERAL sub-select
-- whose only indexable condition is its primary key (the state and class
-- tests are wrapped in IS TRUE), locked there SKIP LOCKED; then its oldest
-- READY node that nobody holds, locked SKIP LOCKED. PostgreSQL re-checks each
-- sub-select's conditions on the row version it locks, so a request or node
-- that moved since the walk read it is dropped; a request that is not ready
-- (or of another class) is walked past, and its READY nodes are not touched.
--
-- ready_at: when the node became READY (migrations/0016); in_state_seconds:
-- how long ago that was on the database's clock, for the pickup histogram.
-- The request's columns (as sql/progress/load_request.sql reads them) and its
-- plan's edges as stored now (sql/progress/load_plan_edges.sql) come with the
-- claim: the claim locked that request row, so re-reading it would only cost
-- round trips (progress.snapshots_from_claim).
--
-- claimed_requests: the claimed rows' request ids, also written to the
-- transaction-local setting qtg.claimed_requests, so that the node load
-- (sql/progress/load_nodes.sql, which reads it) can be sent in the same
-- pipeline as this claim — one round trip, not two (issue 29 item 5). The
-- nodes cannot be read here: this statement's snapshot predates its own locks,
-- so a sibling an observer completed meanwhile would be seen in flight; the
-- load is the next statement, with a snapshot taken after these locks. The
-- window over no ORDER BY adds no sort: rows keep the walk's order.
SELECT c.*,
       set_config('qtg.claimed_requests', (array_agg(c.request_id) OVER ())::text, true)
           AS claimed_requests
FROM (
WITH RECURSIVE heads AS (
    (SELECT n.request_created_at, n.request_id
     FROM movement_request_nodes n
     WHERE n.node_state = 'READY' AND n.node_kind IS DISTINCT FROM 'manual'
          AND n.dispatch_not_before IS NULL
     ORDER BY n.request_created_at, n.request_id
     LIMIT 1)
    UNION ALL
    SELECT nxt.request_created_at, nxt.request_id
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT n.request_created_at, n.request_id
        FROM movement_request_nodes n
        WHERE n.node_state = 'READY' AND n.node_kind IS DISTINCT FROM 'manual'
          AND n.dispatch_not_before IS NULL
          AND (n.request_created_at, n.request_id) > (h.request_created_at, h.request_id)
        ORDER BY n.request_created_at, n.request_id
        LIMIT 1
    ) nxt
)
SELECT n.id, n.request_id,
       r.request_state, r.compiled_plan_hash,
       r.intent, r.input_params,
       r.current_frontier, r.template_version_id, r.policy_version,
       r.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('from_key', f.node_key,
                                                     'to_key', t.node_key)), '[]')
        FROM plan_edges e
        JOIN plan_nodes f ON f.id = e.from_node_id
        JOIN plan_nodes t ON t.id = e.to_node_id
        WHERE e.template_version_id = r.template_version_id) AS plan_edges,
       coalesce(n.state_entered_at, n.updated_at) AS ready_at,
       extract(epoch FROM clock_timestamp() - coalesce(n.state_entered_at, n.updated_at))
           AS in_state_seconds
FROM heads h
CROSS JOIN LATERAL (
    SELECT r.id, r.request_state, r.compiled_plan_hash, r.intent, r.input_params,
           r.current_frontier, r.template_version_id, r.template_id, r.created_at,
           r.policy_version
    FROM movement_requests r
    WHERE r.id = h.request_id
      AND (r.request_state IN ('APPROVED', 'EXECUTING')
           AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
    FOR NO KEY UPDATE SKIP LOCKED
) r
CROSS JOIN LATERAL (
    SELECT n.id, n.request_id, n.state_entered_at, n.updated_at
    FROM movement_request_nodes n
    WHERE n.request_created_at = h.request_created_at
      AND n.request_id = h.request_id
      AND n.node_state = 'READY' AND n.node_kind IS DISTINCT FROM 'manual'
          AND n.dispatch_not_before IS NULL
    ORDER BY n.state_entered_at NULLS FIRST, n.id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
) n
JOIN movement_templates ON movement_templates.id = r.template_id
JOIN template_versions ON template_versions.id = r.template_version_id
-- The LIMIT is a sub-select, not the bare parameter (as in each claim and
-- due-time query that tests/test_plans.py checks): PostgreSQL then costs the
-- plan alike with and without the value, and after its first five calls keeps
-- the connection's one generic plan. With the bare parameter a small LIMIT
-- made each plan costed for its value look cheaper than the generic one, so
-- every call was planned anew: 0.5-0.6 ms of planning against 0.03 ms of
-- execution, per claim, with MG_NODE_DISPATCH_BATCH_SIZE from 1 to 8
-- (pg_stat_statements with track_planning); bench.ab at batch size 4: pickup
-- p50 2.71 ms before, 2.29 after (2026-12-07 07:04 UTC). The generic plan
-- estimates a tenth of the walk's rows for the LIMIT, whatever its value: a
-- claim whose statement joins its claimed rows again must reach them by
-- primary key whatever that estimate (sql/callbacks/claim_due.sql); the plan
-- tests check the generic plans on fresh statistics too.
LIMIT (SELECT %(limit)s::integer)
) c
