-- Routing step: notifications nobody has routed yet, oldest first, each
-- claimed by one dispatcher (SKIP LOCKED) and marked routed in the same
-- statement; the caller inserts their deliveries in the same transaction.
WITH due AS (
    SELECT id
    FROM notifications
    WHERE routed_at IS NULL
    ORDER BY id
    -- The LIMIT is a sub-select, so a plan is costed alike with or without its
    -- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
    LIMIT (SELECT %(limit)s::integer)
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications AS n
SET routed_at = clock_timestamp()
-- The claimed rows by primary key, as an InitPlan's array (as
-- sql/callbacks/claim_due.sql, which says why).
WHERE n.id = ANY(ARRAY(SELECT id FROM due))
RETURNING n.id, n.severity
