-- qtg-bench: pickup latency per node, in ms: from the commit of the transaction
-- that made the node READY to the commit of the dispatcher's write-ahead claim
-- (SUBMITTING). Commit times are PostgreSQL's own (track_commit_timestamp).
SELECT ready.node_id,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(claim.xact_id::xid)
                               - pg_xact_commit_timestamp(ready.xact_id::xid)) AS ms
FROM movement_events ready
JOIN movement_events claim
  ON claim.node_id = ready.node_id
 AND claim.event_type = 'node_state_changed'
 AND claim.to_state = 'SUBMITTING'
WHERE ready.event_type = 'node_state_changed'
  AND ready.to_state = 'READY'
  AND ready.request_id = ANY(%(ids)s::uuid[])
