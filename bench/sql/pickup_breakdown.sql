-- qtg-bench: where a pickup's time goes, per node, in ms. Since the dispatch lease a
-- pickup is two transactions with the prepare between them: the claim (the request
-- APPROVED → EXECUTING, the drift check, the policy's word, the node leased) commits,
-- prepare and sign run with no transaction open, then the write-ahead transaction
-- (BEGIN, which is the node's started_at = now(), the READY → SUBMITTING row) commits.
-- Event rows carry clock_timestamp() at their INSERT.
--   wake:    READY commit → the claim's EXECUTING row (NOTIFY delivery, the hub, the
--            dispatcher's wake-up, a pooled connection, the release of due waits, the
--            batch claim with its request and plan edges and the node load)
--   claim:   EXECUTING row → the claim's commit (the drift check, context, the risk
--            controls and policy, the lease, COMMIT)
--   prepare: the claim's commit → the write-ahead's BEGIN (preflight, prepare, sign with
--            no transaction open, a pooled connection again)
--   commit:  the write-ahead's BEGIN → its commit (the request and node locked again,
--            the checks, the SUBMITTING UPDATE, COMMIT + WAL flush)
SELECT 1000 * extract(epoch FROM executing.created_at
                               - pg_xact_commit_timestamp(ready.xact_id::xid)) AS wake,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(executing.xact_id::xid)
                               - executing.created_at) AS claim,
       1000 * extract(epoch FROM node.started_at
                               - pg_xact_commit_timestamp(executing.xact_id::xid)) AS prepare,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(submitting.xact_id::xid)
                               - node.started_at) AS commit
FROM movement_events ready
JOIN movement_request_nodes node ON node.id = ready.node_id
JOIN movement_events submitting
  ON submitting.node_id = ready.node_id
 AND submitting.event_type = 'node_state_changed'
 AND submitting.to_state = 'SUBMITTING'
JOIN movement_events executing
  ON executing.request_id = ready.request_id
 AND executing.event_type = 'request_state_changed'
 AND executing.to_state = 'EXECUTING'
WHERE ready.event_type = 'node_state_changed'
  AND ready.to_state = 'READY'
  AND ready.request_id = ANY(%(ids)s::uuid[])
