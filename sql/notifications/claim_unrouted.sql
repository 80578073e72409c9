-- Routing step: notifications nobody has routed yet, oldest first, each
-- claimed by one dispatcher (SKIP LOCKED) and marked routed in the same
-- statement; the caller inserts their deliveries in the same transaction.
WITH due AS (
    SELECT id
    FROM notifications
    WHERE routed_at IS NULL
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications AS n
SET routed_at = clock_timestamp()
FROM due
WHERE n.id = due.id
RETURNING n.id, n.severity
