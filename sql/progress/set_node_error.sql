-- Nodes end FAILED or UNKNOWN, with the reason: one row of the arrays per node
-- (qtg.db.deferred). Each node by its primary key, the unnest driving.
UPDATE movement_request_nodes n
SET node_state = e.node_state, error_code = e.error_code, error_detail = e.error_detail,
    next_observe_at = NULL
FROM unnest(%(node_ids)s::uuid[], %(node_states)s::text[], %(error_codes)s::text[],
            %(error_details)s::text[])
     AS e(id, node_state, error_code, error_detail)
WHERE n.id = e.id
