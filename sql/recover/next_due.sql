-- When recovery next has work it knows the time of: the earliest next attempt
-- of a paced UNKNOWN node of this class that nobody holds; a node without one
-- is due now: now(), never '-infinity' (psycopg cannot load it, issue 25
-- item 4). Rows another process holds are skipped (FOR SHARE conflicts with
-- the claims' FOR NO KEY UPDATE of the node or its request), so a node held
-- elsewhere does not make recovery spin.
--
-- An index walk that stops at its first row (issue 25 item 7, issue 29):
-- movement_request_nodes_recover_due (coalesce(next_recover_at, '-infinity'),
-- id) WHERE UNKNOWN and not an observation timeout, in order; each node's
-- request by primary key only (see sql/observe/claim_batch.sql).
--
-- Issue 43 item 7: and the moment a SUBMITTING node's owner will count as gone
-- (its last liveness beat + MG_NODE_RECOVERY_DEAD_OWNER_SECONDS), no earlier than a lease on it ends — so a runtime's recovery
-- wakes within seconds of another process's death, not at its interval. A
-- node held by a submit in flight is NOT skipped here: its owner's death is
-- what releases it, and nothing else would wake this recovery then; so that
-- a node held by an owner that looks dead (hung) cannot make recovery spin,
-- the time is never sooner than a fifth of the bound from now. Driven from
-- runtime_processes (a row per process start), each one's nodes through
-- movement_request_nodes_submitting_owner (SUBMITTING only: few), each
-- request by primary key.
SELECT least(
(
    SELECT coalesce(n.next_recover_at, now())
    FROM movement_request_nodes n
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = n.request_id
          AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
        OFFSET 0
    ) r
    WHERE n.node_state = 'UNKNOWN'
      AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
      -- never claimed by recovery (evm_nonce_reaper's cancel step decides it): as due,
      -- it would wake recovery for nothing, at once, again and again
      AND n.error_code IS DISTINCT FROM 'FAILURE_NOT_PROVEN'
    ORDER BY coalesce(n.next_recover_at, '-infinity'::timestamptz), n.id
    LIMIT 1
    FOR SHARE OF n, r SKIP LOCKED
),
(
    SELECT greatest(p.alive_at + make_interval(secs => %(dead_owner_seconds)s),
                    n.next_recover_at,
                    now() + make_interval(secs => %(dead_owner_seconds)s / 5))
    FROM runtime_processes p
    -- each process's SUBMITTING nodes by the index, bounded (submits in flight
    -- are few); every owner has a row (it beats before its first write-ahead,
    -- and a row is pruned only once it owns no SUBMITTING node)
    CROSS JOIN LATERAL (
        SELECT n.id, n.request_id, n.next_recover_at
        FROM movement_request_nodes n
        WHERE n.submitting_owner = p.instance_id
          AND n.node_state = 'SUBMITTING'
        ORDER BY n.id
        LIMIT 1000
    ) n
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = n.request_id
          AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
        OFFSET 0
    ) r
    ORDER BY 1
    LIMIT 1
)) AS due
