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
SELECT coalesce(n.next_recover_at, now()) AS due
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
ORDER BY coalesce(n.next_recover_at, '-infinity'::timestamptz), n.id
LIMIT 1
FOR SHARE OF n, r SKIP LOCKED
