-- Reference §1, step 1: walk unlocked FIFO candidate ids (no FOR UPDATE here);
-- ids already tried in this pass are excluded after a miss. Manual nodes are
-- never dispatched: an operator completes them.
SELECT n.id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state = 'READY'
  AND n.node_kind <> 'manual'
  AND r.request_state IN ('APPROVED', 'EXECUTING')
  AND NOT (n.id = ANY(%(tried)s::uuid[]))
ORDER BY r.created_at ASC, n.id
LIMIT %(limit)s
