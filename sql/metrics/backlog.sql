-- Every backlog the metrics endpoint reports, in one bounded statement: one
-- row per (kind, state), at most 9 rows. Node and request counts are scoped
-- to this process's network class (movement_requests.network_class); the
-- node states are the ones the partial claim indexes cover. The audit outbox
-- is not network-scoped (one chain per database).
SELECT 'node' AS kind, n.node_state AS state, count(*)::bigint AS total
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state IN ('READY', 'SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')
  AND r.network_class = %(network_class)s
GROUP BY n.node_state
UNION ALL
SELECT 'request', 'MANUAL_INTERVENTION', count(*)::bigint
FROM movement_requests
WHERE request_state = 'MANUAL_INTERVENTION' AND network_class = %(network_class)s
UNION ALL
SELECT 'callback', o.status, count(*)::bigint
FROM movement_callback_outbox o
JOIN movement_requests r ON r.id = o.request_id
WHERE o.status IN ('pending', 'dlq') AND r.network_class = %(network_class)s
GROUP BY o.status
UNION ALL
SELECT 'audit_outbox', 'pending', count(*)::bigint FROM audit_outbox
