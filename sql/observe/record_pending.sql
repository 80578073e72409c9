-- Still in flight: observe again after the interval (reference "Observation
-- interval control"). The lease ends here (observe_lease NULL): moving
-- next_observe_at from the lease's end back to the poll time then wakes no
-- observer (migrations/0022_observe_lease.sql).
UPDATE movement_request_nodes
SET node_state = 'OBSERVING',
    observe_count = observe_count + 1,
    next_observe_at = now() + make_interval(secs => %(interval_seconds)s),
    observe_lease = NULL,
    error_detail = %(error_detail)s,
    provider_refs = provider_refs || %(provider_refs)s,
    artifacts = artifacts || %(artifacts)s
WHERE id = %(node_id)s
