-- Every node of the requests with what execution needs of its plan node and
-- its place in the DAG (direct predecessors and successors, kept on the plan
-- node since migration 0029), in plan order.
--
-- One walk of the request_id index per request is the only plan (issue 29):
-- the ids are made distinct first and each request's nodes are a LATERAL
-- sub-select (OFFSET 0 keeps the planner from flattening it). Written as
-- n.request_id = ANY(ids), with statistics from before a burst, the planner
-- guessed a fixed share of the table per id and, for a batch of 64 requests,
-- seq-scanned the whole node table: 4.4 ms on 10k in flight, on every claim,
-- growing with the backlog.
--
-- The requests are the ones named in qtg.claimed_requests: by the batch claim
-- of this transaction (sql/dispatch/claim_batch.sql, sql/observe/claim_batch.sql),
-- so this load travels in the claim's pipeline, before its ids are known here;
-- or by sql/progress/name_requests.sql, which says why there is no parameter.
SELECT n.id, n.request_id, n.node_key, n.node_kind, n.action_type, n.node_state, n.attempt_no,
       n.idempotency_key, n.started_at, n.next_observe_at, n.observe_count,
       n.provider_refs, n.artifacts, n.error_code, n.recover_attempts, n.transient_tries,
       n.unsent_attempts,
       p.id AS plan_node_id, p.executor_key, p.config, p.timeout_policy, p.position,
       p.predecessor_keys, p.successor_keys
FROM (SELECT DISTINCT wanted.id
      FROM unnest(nullif(current_setting('qtg.claimed_requests', true), '')::uuid[])
           AS wanted(id)) AS wanted
CROSS JOIN LATERAL (
    SELECT n.*
    FROM movement_request_nodes n
    WHERE n.request_id = wanted.id
    OFFSET 0
) n
JOIN plan_nodes p ON p.id = n.plan_node_id
ORDER BY n.request_id, p.position
