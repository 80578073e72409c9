-- Issue 15, the batch claim of observations: up to %(limit)s due SUBMITTED /
-- OBSERVING nodes, oldest request first (movement_requests.created_at ASC),
-- locked with their requests in ONE statement: FOR NO KEY UPDATE OF node,
-- request (see qtg/services/dispatch.py on why NO KEY UPDATE and on lock
-- order). SKIP LOCKED drops a node whose row or request someone else holds
-- (PostgreSQL re-checks the WHERE clause on every row it locks, so a node
-- another observer advanced since the scan is dropped too). Several nodes of
-- one request may come together: this transaction then holds that request
-- once, and their outcomes are applied to one snapshot in claim order.
--
-- A streaming walk, nodes first: n.request_created_at is the node's copy of
-- its request's immutable created_at (migrations/0017), and the partial index
-- movement_request_nodes_observable_fifo (request_created_at,
-- coalesce(next_observe_at, '-infinity'), id) yields the nodes in claim order
-- with the due test checked on the index entry (an Index Cond: a node that is
-- not due costs no heap visit). Each candidate joins its request by primary
-- key, and the walk stops once %(limit)s rows are locked; no sort across the
-- EXECUTING requests.
--
-- The walk is the only plan (issue 29): the request is a LATERAL sub-select
-- (OFFSET 0 keeps the planner from flattening it) whose one indexable
-- condition is its primary key — its state and class tests are wrapped in
-- IS TRUE so no other index of movement_requests can serve them. So the
-- planner cannot drive from movement_requests, as it did with statistics from
-- before a burst (one bitmap scan of the whole observable index per EXECUTING
-- request: 2 s on 10k requests, against 0.3 ms for the walk). The request is
-- locked inside the sub-select (FOR ... OF r applies there), before its node:
-- SKIP LOCKED either way, so nothing waits; a request locked for a node
-- then found held stays locked (unused) until this transaction ends. The due test must stay written exactly as the index
-- expression (coalesce(next_observe_at, '-infinity') <= now(), the same as
-- next_observe_at IS NULL OR next_observe_at <= now()).
--
-- db_now is the transaction's clock, for the observation timeout. The
-- request's columns (as sql/progress/load_request.sql reads them) come with
-- the claim, which locked that row (progress.snapshots_from_claim).
--
-- claimed_requests: the claimed rows' request ids, also written to the
-- transaction-local setting qtg.claimed_requests, so that the node load
-- (sql/progress/load_nodes.sql, which reads it) travels in this claim's
-- pipeline — one round trip, not two (progress.claim_with_nodes; the
-- dispatch claim does the same, and sql/dispatch/claim_batch.sql says why
-- the nodes cannot be read by this statement itself). claimed_nodes: the
-- claimed node ids, in the setting qtg.claimed_nodes for the lease
-- (sql/observe/take_lease.sql with node_ids NULL), which then goes in the same
-- pipeline with the COMMIT: the whole claim transaction is one round trip. The
-- windows over no ORDER BY add no sort: rows keep the walk's order.
SELECT c.*,
       set_config('qtg.claimed_requests', (array_agg(c.request_id) OVER ())::text, true)
           AS claimed_requests,
       set_config('qtg.claimed_nodes', (array_agg(c.id) OVER ())::text, true)
           AS claimed_nodes
FROM (
SELECT n.id, n.request_id, now() AS db_now,
       r.request_state, r.compiled_plan_hash,
       r.intent, r.input_params,
       r.current_frontier, r.template_version_id,
       r.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls,
       n.node_state,
       extract(epoch FROM clock_timestamp() - coalesce(n.state_entered_at, n.updated_at))
           AS in_state_seconds
FROM movement_request_nodes n
CROSS JOIN LATERAL (
    SELECT r.id, r.request_state, r.compiled_plan_hash, r.intent, r.input_params,
           r.current_frontier, r.template_version_id, r.template_id, r.created_at
    FROM movement_requests r
    WHERE r.id = n.request_id
      AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
JOIN movement_templates ON movement_templates.id = r.template_id
JOIN template_versions ON template_versions.id = r.template_version_id
WHERE n.node_state IN ('SUBMITTED', 'OBSERVING')
  AND coalesce(n.next_observe_at, '-infinity'::timestamptz) <= now()
ORDER BY n.request_created_at, coalesce(n.next_observe_at, '-infinity'::timestamptz), n.id
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
FOR NO KEY UPDATE OF n, r SKIP LOCKED
) c
