-- Reference §3: one arm's lane, longest-idle first, of EXECUTING requests of
-- this deployment's network class only. A lane is an action_type LIKE pattern;
-- the catch-all lane (pattern NULL) takes what matches none of the named
-- lanes. UNKNOWN nodes whose next recovery attempt is due (an undecided
-- recover() pushes next_recover_at back, so no process asks again at once),
-- and SUBMITTING nodes past the lane's grace cutoff (stranded between the
-- write-ahead commit and submit's return). Observation timeouts are left for
-- an operator (reference §2).
SELECT n.id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE r.request_state = 'EXECUTING'
  AND r.network_class = %(network_class)s
  AND ((n.node_state = 'UNKNOWN' AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
        AND (n.next_recover_at IS NULL OR n.next_recover_at <= now()))
       OR (n.node_state = 'SUBMITTING'
           AND n.updated_at < now() - make_interval(secs => %(grace_seconds)s)))
  AND CASE WHEN %(lane_pattern)s::text IS NULL
           THEN NOT (n.action_type LIKE ANY(%(named_patterns)s::text[]))
           ELSE n.action_type LIKE %(lane_pattern)s::text
      END
ORDER BY n.updated_at ASC
LIMIT %(limit)s
