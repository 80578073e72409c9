-- Issues 25 (items 4, 6, 7) and 29 (item 2): every claim and due-time query
-- walks a node index in its own order and stops at its LIMIT, whatever the
-- planner's statistics say. The queries (sql/dispatch, sql/observe,
-- sql/recover) join their request through a LATERAL sub-select by primary key
-- only, so the node index is the only way in; the indexes below are the
-- orders they walk.

-- The dispatch claim takes the oldest READY node of each of the oldest ready
-- requests (one node per request per batch: each request gets its turn). It
-- finds the requests by a skip scan over (request_created_at, request_id),
-- so the request id must be in the key. Replaces movement_request_nodes_ready_fifo
-- (request_created_at, id), whose walk this one also serves.
CREATE INDEX movement_request_nodes_ready_heads
    ON movement_request_nodes (request_created_at, request_id, id)
    WHERE node_state = 'READY' AND node_kind <> 'manual';
DROP INDEX movement_request_nodes_ready_fifo;

-- The observer's next due time (sql/observe/next_due.sql): the earliest
-- observable node, NULL (observe at once) first, as the query orders it.
-- Replaces movement_request_nodes_observable (next_observe_at), which sorted
-- NULLs last and served only that query.
CREATE INDEX movement_request_nodes_observe_due
    ON movement_request_nodes ((coalesce(next_observe_at, '-infinity'::timestamptz)), id)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING');
DROP INDEX movement_request_nodes_observable;

-- Recovery's next due time (sql/recover/next_due.sql): paced UNKNOWN nodes,
-- NULL (ask now) first. Observation timeouts are left for an operator and
-- are not in it.
CREATE INDEX movement_request_nodes_recover_due
    ON movement_request_nodes ((coalesce(next_recover_at, '-infinity'::timestamptz)), id)
    WHERE node_state = 'UNKNOWN' AND error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT';
