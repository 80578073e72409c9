-- An observe-only node has no side effect: it goes straight to observation, due now.
UPDATE movement_request_nodes
SET node_state = 'OBSERVING',
    attempt_no = %(attempt_no)s,
    started_at = now(),  -- each attempt its own observation clock (issue 10)
    recover_attempts = 0,
    next_recover_at = NULL,
    next_observe_at = now(),
    error_code = NULL,
    error_detail = NULL
WHERE id = %(node_id)s
  AND node_state = 'READY'
