-- An observe-only node has no side effect: it goes straight to observation, due now.
UPDATE movement_request_nodes
SET node_state = 'OBSERVING',
    attempt_no = %(attempt_no)s,
    started_at = coalesce(started_at, now()),
    next_observe_at = now(),
    error_code = NULL,
    error_detail = NULL
WHERE id = %(node_id)s
  AND node_state = 'READY'
