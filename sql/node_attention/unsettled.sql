-- Issue 25 item 2: EXECUTING requests of this network class with nothing in
-- flight and nothing a worker would start, whose request state the nodes
-- already decide — the state a settle that failed (after its node outcome
-- committed in another transaction) left behind. The conditions are those of
-- qtg.domain.derive.derive_request_state giving a state other than "no change",
-- so a request only recovery can move on (an UNKNOWN node, no side effect) is
-- not listed again and again; the caller derives again under the request's
-- lock, so this list only has to be a superset of nothing wrong.
--
-- grace_seconds: leave alone a request whose nodes changed very recently —
-- its own worker is about to settle it.
SELECT r.id
FROM movement_requests r
CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE n.node_state IN ('COMPLETED', 'SKIPPED')) AS done,
           count(*) FILTER (WHERE n.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING'))
               AS in_flight,
           count(*) FILTER (WHERE n.node_state = 'READY' AND n.action_type LIKE 'manual\_%%')
               AS ready_manual,
           count(*) FILTER (WHERE n.node_state = 'READY'
                            AND n.action_type NOT LIKE 'manual\_%%') AS ready_other,
           count(*) FILTER (WHERE n.node_state = 'FAILED') AS failed,
           count(*) FILTER (WHERE n.node_state = 'UNKNOWN') AS unknown,
           count(*) FILTER (WHERE n.node_state = 'UNKNOWN'
                            AND n.error_code = 'OBSERVATION_TIMEOUT') AS waits_operator,
           count(*) FILTER (WHERE n.node_kind = 'action' AND n.node_state = 'COMPLETED')
               AS side_effects,
           max(n.updated_at) AS last_change
    FROM movement_request_nodes n
    WHERE n.request_id = r.id
) s
WHERE r.request_state = 'EXECUTING'
  AND r.network_class = %(network_class)s
  AND s.total > 0
  AND s.last_change < now() - make_interval(secs => %(grace_seconds)s)
  AND (s.done = s.total
       OR (s.in_flight = 0
           AND ((s.side_effects > 0 AND (s.failed > 0 OR s.unknown > 0))
                OR s.waits_operator > 0
                OR (s.failed > 0 AND s.unknown = 0)
                OR (s.ready_manual > 0 AND s.ready_other = 0 AND s.unknown = 0))))
ORDER BY s.last_change
LIMIT %(limit)s
