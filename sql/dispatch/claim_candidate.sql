-- Reference §1, step 2: the per-candidate joined claim, run under a miss-only
-- savepoint by the caller (a miss rolls the savepoint back, releasing any
-- partial lock PostgreSQL took on the node before skipping the request).
--
-- The request's state and class tests are wrapped in IS TRUE (issue 29): the
-- join's primary key is then the only index of movement_requests that serves
-- this claim. Written plainly, with statistics from before a burst, the planner
-- probed the (network_class, request_state, created_at) index instead and
-- filtered every APPROVED or EXECUTING request of the class by id: 2.1 ms per claim
-- on 10k in flight, growing with the backlog, against 0.05 ms by primary key.
-- The node's tests are wrapped so too (issue 44 item 4): a generic plan made
-- while the table was empty took the READY partial index and filtered it by id.
SELECT movement_request_nodes.id, movement_request_nodes.request_id,
       movement_requests.request_state,
       coalesce(movement_request_nodes.state_entered_at,
                movement_request_nodes.updated_at) AS ready_at,
       extract(epoch FROM clock_timestamp() - coalesce(movement_request_nodes.state_entered_at,
                                                       movement_request_nodes.updated_at))
           AS in_state_seconds
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE movement_request_nodes.id = %(candidate_id)s
  AND (movement_request_nodes.node_state = 'READY'
       AND movement_request_nodes.node_kind <> 'manual'
       AND movement_request_nodes.dispatch_not_before IS NULL) IS TRUE
  AND (movement_requests.request_state IN ('APPROVED', 'EXECUTING')
       AND movement_requests.network_class = %(network_class)s) IS TRUE
FOR NO KEY UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED
