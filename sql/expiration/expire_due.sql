-- Reference §5's pickup (PENDING_APPROVAL, expires_at passed, LIMIT, SKIP
-- LOCKED: a request an operator is approving right now is skipped, not waited
-- on) and the transition, in one statement. The request triggers write the
-- request_state_changed event and, when the request has a callback_url, its
-- callback row in this same transaction.
WITH due AS (
    SELECT id
    FROM movement_requests
    WHERE request_state = 'PENDING_APPROVAL'
      AND network_class = %(network_class)s
      AND expires_at IS NOT NULL
      AND expires_at < now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE movement_requests AS r
SET request_state = 'EXPIRED',
    decided_by = %(actor)s
FROM due
WHERE r.id = due.id
RETURNING r.id, r.expires_at
