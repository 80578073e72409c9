-- qtg-bench: where a pickup's time goes, per node, in ms. The claim transaction
-- writes two event rows while it runs (clock_timestamp at the write): the
-- request's APPROVED → EXECUTING (after the claim and the snapshot load) and the
-- node's READY → SUBMITTING (the write-ahead UPDATE). Segments:
--   wake: READY commit → EXECUTING row (wake-up, BEGIN, candidate list, savepoint,
--         claim, release, load request, load nodes, the UPDATE itself)
--   prepare: EXECUTING row → SUBMITTING row (plan edges, drift check, context,
--         preflight, prepare, sign, the write-ahead UPDATE itself)
--   commit: SUBMITTING row → its commit (the COMMIT round trip)
SELECT 1000 * extract(epoch FROM executing.created_at
                               - pg_xact_commit_timestamp(ready.xact_id::xid)) AS wake,
       1000 * extract(epoch FROM claim.created_at - executing.created_at) AS prepare,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(claim.xact_id::xid)
                               - claim.created_at) AS commit
FROM movement_events ready
JOIN movement_events claim
  ON claim.node_id = ready.node_id
 AND claim.event_type = 'node_state_changed'
 AND claim.to_state = 'SUBMITTING'
JOIN movement_events executing
  ON executing.request_id = ready.request_id
 AND executing.event_type = 'request_state_changed'
 AND executing.to_state = 'EXECUTING'
 AND executing.xact_id = claim.xact_id
WHERE ready.event_type = 'node_state_changed'
  AND ready.to_state = 'READY'
  AND ready.request_id = ANY(%(ids)s::uuid[])
