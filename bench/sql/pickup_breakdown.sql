-- qtg-bench: where a pickup's time goes, per node, in ms. The claim transaction
-- leaves three marks: its start (the node's started_at = now(), the time of its
-- BEGIN), the request's APPROVED → EXECUTING event row (written after the claim
-- and the snapshot load) and the node's READY → SUBMITTING event row (the
-- write-ahead UPDATE); event rows carry clock_timestamp() at their INSERT.
--   wake:    READY commit → BEGIN (NOTIFY delivery, the hub, the dispatcher's
--            wake-up, a pooled connection, and the transaction that releases
--            due transient waits, committed ahead of the BEGIN in the same
--            pipeline)
--   claim:   BEGIN → EXECUTING row (the batch claim with its request and plan
--            edges and the node load, in that same round trip; drift check,
--            context, preflight, prepare, sign, then the request UPDATE: it is
--            deferred, so it runs in the pipeline sent ahead of the COMMIT)
--   prepare: EXECUTING row → SUBMITTING row (the write-ahead UPDATE, next in
--            that pipeline)
--   commit:  SUBMITTING row → its commit (the COMMIT round trip)
SELECT 1000 * extract(epoch FROM node.started_at
                               - pg_xact_commit_timestamp(ready.xact_id::xid)) AS wake,
       1000 * extract(epoch FROM executing.created_at - node.started_at) AS claim,
       1000 * extract(epoch FROM submitting.created_at - executing.created_at) AS prepare,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(submitting.xact_id::xid)
                               - submitting.created_at) AS commit
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
 AND executing.xact_id = submitting.xact_id
WHERE ready.event_type = 'node_state_changed'
  AND ready.to_state = 'READY'
  AND ready.request_id = ANY(%(ids)s::uuid[])
