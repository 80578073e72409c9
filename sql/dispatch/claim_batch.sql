-- Issue 15, the batch claim: up to %(limit)s READY nodes, FIFO by request age
-- (movement_requests.created_at ASC, then node id), locked with their
-- requests in ONE statement: FOR NO KEY UPDATE OF node, request (see
-- qtg/services/dispatch.py on why NO KEY UPDATE and on lock order).
--
-- A streaming walk, not a scan: n.request_created_at is the node's copy of
-- its request's created_at (migrations/0017, written by a trigger from the
-- immutable request column), so the partial index
-- movement_request_nodes_ready_fifo (request_created_at, id) WHERE READY and
-- not manual yields candidates already in claim order, each joined to its
-- request by primary key, and the walk stops once %(limit)s rows are locked.
-- SKIP LOCKED drops a candidate whose node or request someone else holds;
-- PostgreSQL re-checks the WHERE clause on each row it locks, so a node that
-- moved since the index was read is dropped too. A node locked before its
-- request was found held stays locked (still READY) until this transaction
-- ends: the next pass takes it.
--
-- DISTINCT ON cannot be combined with FOR UPDATE, so this may return several
-- nodes of one request (a fan-out plan). dispatch_batch keeps the first row
-- per request (claim order) and leaves the others out of the batch: they stay
-- locked, still READY, until the write-ahead commit ends the transaction,
-- and the next pass (the loop runs one at once after a pass that claimed
-- anything) takes them.
--
-- ready_at: when the node became READY (migrations/0016); in_state_seconds:
-- how long ago that was on the database's clock, for the pickup histogram.
-- The request's columns (as sql/progress/load_request.sql reads them) and its
-- plan's edges as stored now (sql/progress/load_plan_edges.sql) come with the
-- claim: the claim locked that request row, so re-reading it would only cost
-- round trips (progress.snapshots_from_claim).
SELECT n.id, n.request_id,
       r.request_state, r.compiled_plan_hash,
       r.intent, r.input_params,
       r.current_frontier, r.template_version_id,
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
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
JOIN movement_templates ON movement_templates.id = r.template_id
JOIN template_versions ON template_versions.id = r.template_version_id
WHERE n.node_state = 'READY'
  AND n.node_kind <> 'manual'
  AND r.request_state IN ('APPROVED', 'EXECUTING')
  AND r.network_class = %(network_class)s
ORDER BY n.request_created_at, n.id
LIMIT %(limit)s
FOR NO KEY UPDATE OF n, r SKIP LOCKED
