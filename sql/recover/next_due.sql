-- When recovery next has work it knows the time of: the earliest next attempt
-- of a paced UNKNOWN node (NULL: ask now). Rows another process holds are
-- skipped (FOR SHARE conflicts with the claims' FOR NO KEY UPDATE of the node
-- or its request), so a node held elsewhere does not make recovery spin.
SELECT coalesce(n.next_recover_at, '-infinity') AS due
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state = 'UNKNOWN'
  AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT'
  AND r.request_state = 'EXECUTING'
  AND r.network_class = %(network_class)s
ORDER BY n.next_recover_at ASC NULLS FIRST
LIMIT 1
FOR SHARE OF n, r SKIP LOCKED
