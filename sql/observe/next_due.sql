-- When the observer next has work, so it can sleep exactly until then.
SELECT min(coalesce(n.next_observe_at, '-infinity')) AS due
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state IN ('SUBMITTED', 'OBSERVING')
  AND r.request_state = 'EXECUTING'
