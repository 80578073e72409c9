-- DESIGN §4, the write-ahead step: committed before the executor's submit is
-- called, so a crash can never lead to a blind second submit.
UPDATE movement_request_nodes
SET node_state = 'SUBMITTING',
    attempt_no = %(attempt_no)s,
    idempotency_key = %(idempotency_key)s,
    prepared_action = %(prepared_action)s,
    started_at = now(),  -- each attempt its own observation clock (issue 10)
    recover_attempts = 0,
    next_recover_at = NULL,
    error_code = NULL,
    error_detail = NULL
WHERE id = %(node_id)s
  AND node_state = 'READY'
