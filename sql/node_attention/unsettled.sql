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
--
-- Bounded (issue 44 item 5): it aggregated the nodes of every EXECUTING request
-- of the class after every recovery pass. Now a window of at most %(scan)s of
-- them, in (created_at, id) order after the caller's cursor (NULL: from the
-- start), walked through movement_requests_executing_walk (migrations/0063); the caller
-- moves the cursor on and wraps to the start past the end
-- (qtg.services.node_attention.settle_unsettled). Returned: the window's
-- unsettled requests, and its last request (is_last; window_size: how many it
-- read) for the cursor.
WITH win AS (
    SELECT r.id, r.created_at
    FROM movement_requests r
    WHERE r.network_class = %(network_class)s
      AND r.request_state = 'EXECUTING'
      AND (r.created_at, r.id) > (coalesce(%(after_created_at)s::timestamptz, '-infinity'),
                                  coalesce(%(after_id)s::uuid,
                                           '00000000-0000-0000-0000-000000000000'))
    ORDER BY r.created_at, r.id
    LIMIT (SELECT %(scan)s::integer)
), judged AS (
    SELECT w.id, w.created_at,
           row_number() OVER (ORDER BY w.created_at DESC, w.id DESC) = 1 AS is_last,
           count(*) OVER () AS window_size,
           s.total > 0
           AND s.last_change < now() - make_interval(secs => %(grace_seconds)s)
           AND (s.done = s.total
                OR (s.in_flight = 0
                    AND ((s.side_effects > 0 AND (s.failed > 0 OR s.unknown > 0))
                         OR s.waits_operator > 0
                         OR (s.failed > 0 AND s.unknown = 0)
                         OR (s.ready_manual > 0 AND s.ready_other = 0 AND s.unknown = 0))))
               AS unsettled
    FROM win w
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
        WHERE n.request_id = w.id
    ) s
)
SELECT id, created_at, is_last, window_size, unsettled
FROM judged
WHERE unsettled OR is_last
ORDER BY created_at, id
