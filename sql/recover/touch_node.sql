-- recover() could not tell: record why, count it, and ask again only after
-- the backoff (qtg.domain.faults.recovery_retry_delay). updated_at moves too,
-- so the node goes to the back of its lane.
UPDATE movement_request_nodes
SET error_detail = %(error_detail)s,
    recover_attempts = recover_attempts + 1,
    next_recover_at = now() + make_interval(secs => %(delay_seconds)s)
WHERE id = %(node_id)s
