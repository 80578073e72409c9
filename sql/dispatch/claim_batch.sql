-- Issue 15, the batch claim: up to %(limit)s READY nodes, at most one per
-- request (the first by id, as the per-candidate walk would take it), FIFO by
-- request age, locked with their requests in ONE statement. SKIP LOCKED drops a
-- candidate whose node or request someone else holds; PostgreSQL re-checks the
-- WHERE clause on each row it locks, so a node that moved since the candidate
-- scan is dropped too. A node locked before its request was found held stays
-- locked (still READY) until this transaction ends: the next pass takes it.
-- ready_at: when the node became READY (migrations/0016); in_state_seconds:
-- how long ago that was on the database's clock, for the pickup histogram.
-- The request's columns (as sql/progress/load_request.sql reads them) and its
-- plan's edges as stored now (sql/progress/load_plan_edges.sql) come with the
-- claim: the claim locked that request row, so re-reading it would only cost
-- round trips (progress.snapshots_from_claim).
WITH candidates AS MATERIALIZED (
    SELECT DISTINCT ON (n.request_id) n.id, r.created_at
    FROM movement_request_nodes n
    JOIN movement_requests r ON r.id = n.request_id
    WHERE n.node_state = 'READY'
      AND n.node_kind <> 'manual'
      AND r.request_state IN ('APPROVED', 'EXECUTING')
      AND r.network_class = %(network_class)s
    ORDER BY n.request_id, n.id
)
SELECT movement_request_nodes.id, movement_request_nodes.request_id,
       movement_requests.request_state, movement_requests.compiled_plan_hash,
       movement_requests.intent, movement_requests.input_params,
       movement_requests.current_frontier, movement_requests.template_version_id,
       movement_requests.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('from_key', f.node_key,
                                                     'to_key', t.node_key)), '[]')
        FROM plan_edges e
        JOIN plan_nodes f ON f.id = e.from_node_id
        JOIN plan_nodes t ON t.id = e.to_node_id
        WHERE e.template_version_id = movement_requests.template_version_id) AS plan_edges,
       coalesce(movement_request_nodes.state_entered_at,
                movement_request_nodes.updated_at) AS ready_at,
       extract(epoch FROM clock_timestamp() - coalesce(movement_request_nodes.state_entered_at,
                                                       movement_request_nodes.updated_at))
           AS in_state_seconds
FROM candidates
JOIN movement_request_nodes ON movement_request_nodes.id = candidates.id
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
JOIN movement_templates ON movement_templates.id = movement_requests.template_id
JOIN template_versions ON template_versions.id = movement_requests.template_version_id
WHERE movement_request_nodes.node_state = 'READY'
  AND movement_request_nodes.node_kind <> 'manual'
  AND movement_requests.request_state IN ('APPROVED', 'EXECUTING')
  AND movement_requests.network_class = %(network_class)s
ORDER BY candidates.created_at, movement_request_nodes.id
LIMIT %(limit)s
FOR NO KEY UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED
