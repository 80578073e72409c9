-- Reference §2, phase 2: per-node claim of node and request, still filtered on
-- the due predicate so a node another worker already advanced is not re-claimed.
--
-- The request's state and class tests are wrapped in IS TRUE (issue 29): the
-- join's primary key is then the only index of movement_requests that serves
-- this claim. Written plainly, with statistics from before a burst, the planner
-- probed the (network_class, request_state, created_at) index instead and
-- filtered every EXECUTING request of the class by id: 2.1 ms per claim
-- on 10k in flight, growing with the backlog, against 0.05 ms by primary key.
-- The node's tests are wrapped so too (issue 44 item 4): a generic plan made
-- while the table was empty walked the observe_due partial index, filtering by id.
SELECT movement_request_nodes.id, movement_request_nodes.request_id, now() AS db_now,
       movement_request_nodes.node_state,
       extract(epoch FROM clock_timestamp() - coalesce(movement_request_nodes.state_entered_at,
                                                       movement_request_nodes.updated_at))
           AS in_state_seconds
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE movement_request_nodes.id = %(node_id)s
  AND (movement_request_nodes.node_state IN ('SUBMITTED', 'OBSERVING')
       AND (movement_request_nodes.next_observe_at IS NULL
            OR movement_request_nodes.next_observe_at <= now())) IS TRUE
  AND (movement_requests.request_state = 'EXECUTING'
       AND movement_requests.network_class = %(network_class)s) IS TRUE
FOR NO KEY UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED
