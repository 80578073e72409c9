-- recover() says it happened and is still in flight: observe it again, now.
UPDATE movement_request_nodes
SET node_state = %(node_state)s,
    submitted_at = coalesce(submitted_at, now()),
    next_observe_at = now(),
    error_code = NULL,
    error_detail = NULL,
    recover_attempts = 0,
    next_recover_at = NULL,
    provider_refs = provider_refs || %(provider_refs)s,
    artifacts = artifacts || %(artifacts)s
WHERE id = %(node_id)s
