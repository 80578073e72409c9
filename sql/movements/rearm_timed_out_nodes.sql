-- Resume after an observation timeout: recovery skips OBSERVATION_TIMEOUT nodes
-- (reference §2, left for an operator); once the operator resumes, they go back
-- to recovery, and their observation window starts again.
UPDATE movement_request_nodes
SET error_code = 'OBSERVATION_TIMEOUT_ACKNOWLEDGED',
    error_detail = 'observation timeout acknowledged by ' || %(actor)s || '; watching again',
    started_at = now()
WHERE request_id = %(request_id)s
  AND node_state = 'UNKNOWN'
  AND error_code = 'OBSERVATION_TIMEOUT'
RETURNING node_key
