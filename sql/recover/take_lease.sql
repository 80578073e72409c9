-- Issue 44 item 3: the claim's lease, in the claim's transaction (which holds the
-- row: no wait). next_recover_at moves past the recover() call, so neither an
-- UNKNOWN nor a SUBMITTING node is a candidate for any other recovery pass while
-- this one asks the provider with no lock held (both candidate tests require
-- next_recover_at to be due). Returns the node's attempt and state as leased.
UPDATE movement_request_nodes
SET recover_lease = %(lease)s,
    next_recover_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(node_id)s
RETURNING attempt_no, node_state
