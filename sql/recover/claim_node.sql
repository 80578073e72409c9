-- Reference §3's claim of one candidate (node and request, SKIP LOCKED), still
-- filtered on the listing's predicate: another process may have recovered it,
-- or pushed its next attempt back, since the listing.
SELECT n.id, n.request_id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.id = %(node_id)s
  AND r.request_state = 'EXECUTING'
  AND r.network_class = %(network_class)s
  AND ((n.node_state = 'UNKNOWN' AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
        AND (n.next_recover_at IS NULL OR n.next_recover_at <= now()))
       OR (n.node_state = 'SUBMITTING'
           AND n.updated_at < now() - make_interval(secs => %(grace_seconds)s)))
FOR NO KEY UPDATE OF n, r SKIP LOCKED
