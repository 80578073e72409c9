-- Status taken from the movement, for any transfer the trigger did not keep
-- in step (it normally does, in the movement's own transaction); this
-- runtime's network class only (issue 25).
WITH stale AS (
    SELECT t.id, qtg_capital_transfer_status(r.request_state) AS status
    FROM capital_transfer_requests t
    JOIN movement_requests r ON r.id = t.request_id
    WHERE t.status <> qtg_capital_transfer_status(r.request_state)
      AND t.network_class = %(network_class)s
    ORDER BY t.created_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE capital_transfer_requests AS t
SET status = stale.status, followed_up_at = now()
FROM stale
WHERE t.id = stale.id
