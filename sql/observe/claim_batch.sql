-- Issue 15, the batch claim of observations: up to %(limit)s due SUBMITTED /
-- OBSERVING nodes, oldest request first, locked with their requests in ONE
-- statement. SKIP LOCKED drops a node whose row or request someone else holds
-- (PostgreSQL re-checks the WHERE clause on every row it locks, so a node
-- another observer advanced since the scan is dropped too). Several nodes of
-- one request may come together: this transaction then holds that request
-- once, and their outcomes are applied to one snapshot in claim order.
-- db_now is the transaction's clock, for the observation timeout. The
-- request's columns (as sql/progress/load_request.sql reads them) come with
-- the claim, which locked that row (progress.snapshots_from_claim).
SELECT movement_request_nodes.id, movement_request_nodes.request_id, now() AS db_now,
       movement_requests.request_state, movement_requests.compiled_plan_hash,
       movement_requests.intent, movement_requests.input_params,
       movement_requests.current_frontier, movement_requests.template_version_id,
       movement_requests.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls,
       movement_request_nodes.node_state,
       extract(epoch FROM clock_timestamp() - coalesce(movement_request_nodes.state_entered_at,
                                                       movement_request_nodes.updated_at))
           AS in_state_seconds
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
JOIN movement_templates ON movement_templates.id = movement_requests.template_id
JOIN template_versions ON template_versions.id = movement_requests.template_version_id
WHERE movement_request_nodes.node_state IN ('SUBMITTED', 'OBSERVING')
  AND movement_requests.request_state = 'EXECUTING'
  AND movement_requests.network_class = %(network_class)s
  AND (movement_request_nodes.next_observe_at IS NULL
       OR movement_request_nodes.next_observe_at <= now())
ORDER BY movement_requests.created_at, movement_request_nodes.id
LIMIT %(limit)s
FOR NO KEY UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED
