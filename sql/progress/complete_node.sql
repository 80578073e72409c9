-- Nodes COMPLETED, with what their provider returned: one row of the arrays per
-- node (qtg.db.deferred: the one-row writes of a transaction go out as one
-- statement, issue 29). Each node by its primary key, the unnest driving.
UPDATE movement_request_nodes n
SET node_state = 'COMPLETED',
    completed_at = now(),
    next_observe_at = NULL,
    error_code = NULL,
    error_detail = NULL,
    provider_refs = n.provider_refs || c.provider_refs,
    artifacts = n.artifacts || c.artifacts
FROM unnest(%(node_ids)s::uuid[], %(provider_refs)s::jsonb[], %(artifacts)s::jsonb[])
     AS c(id, provider_refs, artifacts)
WHERE n.id = c.id
