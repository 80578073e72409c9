UPDATE movement_request_nodes
SET node_state = 'COMPLETED',
    completed_at = now(),
    next_observe_at = NULL,
    error_code = NULL,
    error_detail = NULL,
    provider_refs = provider_refs || %(provider_refs)s,
    artifacts = artifacts || %(artifacts)s
WHERE id = %(node_id)s
