-- BLOCKED -> READY for successors whose predecessors are all done: one row of
-- the arrays per released node (qtg.db.deferred). Each node by its request and
-- key (the unique index), the unnest driving; the state test wrapped in IS TRUE
-- so that stale statistics cannot bring a state index into it.
UPDATE movement_request_nodes n
SET node_state = 'READY'
FROM unnest(%(request_ids)s::uuid[], %(node_keys)s::text[]) AS r(request_id, node_key)
WHERE n.request_id = r.request_id
  AND n.node_key = r.node_key
  AND (n.node_state = 'BLOCKED') IS TRUE
