UPDATE movement_request_nodes
SET node_state = 'SUBMITTED',
    submitted_at = now(),
    next_observe_at = now(),
    provider_refs = provider_refs || %(provider_refs)s,
    artifacts = artifacts || %(artifacts)s
WHERE id = %(node_id)s
