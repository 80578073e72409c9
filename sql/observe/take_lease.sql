-- Issue 25 item 5: the claim's lease, written in the claim's transaction (which
-- holds these rows, so it waits for nobody). next_observe_at moves past the
-- observation, so the nodes are not due for any other observer while this one
-- asks the provider with no lock held; moving it later fires no qtg_observe.
UPDATE movement_request_nodes
SET observe_lease = %(lease)s,
    next_observe_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(%(node_ids)s::uuid[])
