-- Reference §2, phase 2: per-node claim of node and request, still filtered on
-- the due predicate so a node another worker already advanced is not re-claimed.
SELECT movement_request_nodes.id, movement_request_nodes.request_id, now() AS db_now,
       movement_request_nodes.node_state,
       extract(epoch FROM clock_timestamp() - coalesce(movement_request_nodes.state_entered_at,
                                                       movement_request_nodes.updated_at))
           AS in_state_seconds
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE movement_request_nodes.id = %(node_id)s
  AND movement_request_nodes.node_state IN ('SUBMITTED', 'OBSERVING')
  AND movement_requests.request_state = 'EXECUTING'
  AND movement_requests.network_class = %(network_class)s
  AND (movement_request_nodes.next_observe_at IS NULL
       OR movement_request_nodes.next_observe_at <= now())
FOR NO KEY UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED
