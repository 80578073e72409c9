-- qtg-bench: approval → request COMPLETED per request, in ms, between the two
-- transactions' commit times (track_commit_timestamp).
SELECT approved.request_id,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(done.xact_id::xid)
                               - pg_xact_commit_timestamp(approved.xact_id::xid)) AS ms
FROM movement_events approved
JOIN movement_events done
  ON done.request_id = approved.request_id
 AND done.event_type = 'request_state_changed'
 AND done.to_state = 'COMPLETED'
WHERE approved.event_type = 'request_state_changed'
  AND approved.to_state = 'APPROVED'
  AND approved.request_id = ANY(%(ids)s::uuid[])
