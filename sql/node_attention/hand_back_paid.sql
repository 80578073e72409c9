-- Operators said FAILED, but the chain shows the attempt's own payment consumed the nonce:
-- the node is observed again from that transaction (depth, effect), never FAILED.
UPDATE movement_request_nodes
SET node_state = 'SUBMITTED',
    submitted_at = coalesce(submitted_at, now()),
    next_observe_at = now(),
    error_code = NULL,
    error_detail = NULL,
    recover_attempts = 0,
    next_recover_at = NULL,
    provider_refs = provider_refs || %(provider_refs)s
WHERE id = %(node_id)s AND node_state = 'UNKNOWN' AND error_code = 'FAILURE_NOT_PROVEN'
RETURNING id
