-- Submit outcomes "SUBMITTED", one statement for a batch (issue 15): row i of
-- the arrays is one node's refs and artifacts; every node is held SUBMITTING
-- by the caller (sql/dispatch/lock_submitting.sql).
UPDATE movement_request_nodes n
SET node_state = 'SUBMITTED',
    submitted_at = now(),
    next_observe_at = now(),
    provider_refs = n.provider_refs || s.provider_refs,
    artifacts = n.artifacts || s.artifacts
FROM unnest(%(node_ids)s::uuid[], %(provider_refs)s::jsonb[], %(artifacts)s::jsonb[])
     AS s (node_id, provider_refs, artifacts)
WHERE n.id = s.node_id
