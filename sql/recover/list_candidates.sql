-- Reference §3: one arm's lane, longest-idle first, of EXECUTING requests of
-- this deployment's network class only. A lane is an action_type LIKE pattern;
-- the catch-all lane (pattern NULL) takes what matches none of the named
-- lanes. UNKNOWN nodes whose next recovery attempt is due (an undecided
-- recover() pushes next_recover_at back, so no process asks again at once),
-- and SUBMITTING nodes past the lane's grace cutoff (stranded between the
-- write-ahead commit and submit's return). Observation timeouts are left for
-- an operator (reference §2), and nodes operators resolved FAILED that wait for the
-- chain's proof (FAILURE_NOT_PROVEN) to evm_nonce_reaper's cancel step.
--
-- Rows another process holds are left out here (FOR SHARE ... SKIP LOCKED;
-- run on its own, the statement's locks end with it): otherwise held nodes
-- fill the lane's page, every claim misses, and a due node behind them is
-- never reached (issue 25 item 4).
--
-- An index walk of movement_request_nodes_recoverable (updated_at) WHERE
-- UNKNOWN or SUBMITTING, stopping at its LIMIT (the due test is wrapped in
-- IS TRUE so no other partial index offers a bitmap scan and a sort of every
-- match: an arm may face thousands of UNKNOWN nodes after an outage); each node's request by
-- primary key only (a LATERAL sub-select, its tests wrapped in IS TRUE; see
-- sql/observe/claim_batch.sql), so the plan holds whatever the statistics say.
SELECT n.id
FROM movement_request_nodes n
CROSS JOIN LATERAL (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = n.request_id
      AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
WHERE n.node_state IN ('UNKNOWN', 'SUBMITTING')
  AND coalesce(((n.node_state = 'UNKNOWN' AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
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
                AND CASE WHEN %(lane_pattern)s::text IS NULL
                         THEN NOT (n.action_type LIKE ANY(%(named_patterns)s::text[]))
                         ELSE n.action_type LIKE %(lane_pattern)s::text
                    END, false)
ORDER BY n.updated_at ASC
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
FOR SHARE OF n, r SKIP LOCKED
