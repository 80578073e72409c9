-- Reference §1, step 1: walk unlocked FIFO candidate ids (no FOR UPDATE here)
-- of this deployment's network class. Requests on which a claim already missed
-- in this walk are excluded (beyond the reference: every READY node of a held
-- request misses). Manual nodes are never dispatched: an operator completes them.
--
-- An index walk of movement_request_nodes_ready_now (request_created_at,
-- request_id, state_entered_at, id) WHERE READY, not manual and not waiting (migrations/0019), stopping at
-- its LIMIT; each node's request by primary key only (a LATERAL sub-select,
-- its tests wrapped in IS TRUE; see sql/observe/claim_batch.sql), so it does
-- not walk the request history whatever the statistics say (issue 25 item 7).
SELECT n.id, n.request_id
FROM movement_request_nodes n
CROSS JOIN LATERAL (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = n.request_id
      AND (r.request_state IN ('APPROVED', 'EXECUTING')
           AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
WHERE n.node_state = 'READY'
  AND n.node_kind IS DISTINCT FROM 'manual'  -- spelled as migrations/0019's index
  AND n.dispatch_not_before IS NULL  -- waiting out a transient fault
  AND NOT (n.request_id = ANY(%(tried)s::uuid[]))
-- a request's nodes in the order they became READY (issue 44 item 5: by id,
-- a random UUID, the order was chance)
ORDER BY n.request_created_at, n.request_id, n.state_entered_at NULLS FIRST, n.id
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
