-- Reference §2, phase 1: advisory, unlocked snapshot of due candidates.
SELECT movement_request_nodes.id
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE movement_request_nodes.node_state IN ('SUBMITTED', 'OBSERVING')
  AND movement_requests.request_state = 'EXECUTING'
  AND movement_requests.network_class = %(network_class)s
  AND (movement_request_nodes.next_observe_at IS NULL
       OR movement_request_nodes.next_observe_at <= now())
ORDER BY movement_requests.created_at ASC
LIMIT %(limit)s
