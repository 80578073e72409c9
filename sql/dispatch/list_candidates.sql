-- Reference §1, step 1: walk unlocked FIFO candidate ids (no FOR UPDATE here)
-- of this deployment's network class. Requests on which a claim already missed
-- in this walk are excluded (beyond the reference: every READY node of a held
-- request misses). Manual nodes are never dispatched: an operator completes them.
SELECT n.id, n.request_id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.node_state = 'READY'
  AND n.node_kind <> 'manual'
  AND r.request_state IN ('APPROVED', 'EXECUTING')
  AND r.network_class = %(network_class)s
  AND NOT (n.request_id = ANY(%(tried)s::uuid[]))
ORDER BY r.created_at ASC, n.id
LIMIT %(limit)s
