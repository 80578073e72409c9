-- Reference §3's claim of one candidate (node and request, SKIP LOCKED), still
-- filtered on the listing's predicate: another process may have recovered it,
-- or pushed its next attempt back, since the listing.
--
-- The request's state and class tests are wrapped in IS TRUE (issue 29): the
-- join's primary key is then the only index of movement_requests that serves
-- this claim. Written plainly, with statistics from before a burst, the planner
-- probed the (network_class, request_state, created_at) index instead and
-- filtered every EXECUTING request of the class by id: 2.1 ms per claim
-- on 10k in flight, growing with the backlog, against 0.05 ms by primary key.
SELECT n.id, n.request_id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.id = %(node_id)s
  AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
  AND ((n.node_state = 'UNKNOWN' AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
        AND n.error_code IS DISTINCT FROM 'FAILURE_NOT_PROVEN'
        AND (n.next_recover_at IS NULL OR n.next_recover_at <= now()))
       OR (n.node_state = 'SUBMITTING'
           AND (n.updated_at < now() - make_interval(secs => %(grace_seconds)s)
                -- its owner is gone (issue 43 item 7, migrations/0057): at once
                OR (n.submitting_owner IS NOT NULL
                    AND NOT EXISTS (
                        SELECT 1 FROM runtime_processes p
                        WHERE p.instance_id = n.submitting_owner
                          AND p.alive_at >= now() - make_interval(
                                  secs => %(dead_owner_seconds)s))))
           -- not leased to a recover() in flight (sql/recover/take_lease.sql)
           AND (n.next_recover_at IS NULL OR n.next_recover_at <= now())))
FOR NO KEY UPDATE OF n, r SKIP LOCKED
