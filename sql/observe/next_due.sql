-- When the observer next has work, so it can sleep exactly until then. Rows
-- another process holds are skipped (FOR SHARE conflicts with the claims' FOR
-- NO KEY UPDATE of the node or its request): a due node locked through
-- someone's provider call must not make this observer spin at 10 Hz.
-- Its holder commits a new next_observe_at, which notifies qtg_observe.
SELECT coalesce(n.next_observe_at, '-infinity') AS due
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state IN ('SUBMITTED', 'OBSERVING')
  AND r.request_state = 'EXECUTING'
  AND r.network_class = %(network_class)s
ORDER BY n.next_observe_at ASC NULLS FIRST
LIMIT 1
FOR SHARE OF n, r SKIP LOCKED
