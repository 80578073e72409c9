-- qtg-bench: the waiting nodes written (observed PENDING) since the previous
-- sample. A node's row after the observer's write has no lease, its
-- observe_count, and next_observe_at = the write's now() + the interval; the
-- xmin of that row is the write's transaction, whose commit time is when the
-- observation became visible. %(since)s is the previous sample's now() plus
-- the interval less a margin, so a row comes back in the first sample after
-- its write (and at most once more). started_at is the first observation's
-- due time (dispatch's start_observing sets next_observe_at = now() with it).
SELECT /* qtg-bench */ id, observe_count, next_observe_at, started_at,
       xmin::text AS xid,
       pg_xact_commit_timestamp(xmin) AS committed
FROM movement_request_nodes
WHERE node_state = 'OBSERVING'
  AND observe_lease IS NULL
  AND observe_count > 0
  AND next_observe_at > %(since)s
