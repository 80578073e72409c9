-- Sending step: due pending messages, FIFO, SKIP LOCKED, turned into a lease
-- (next_attempt_at moves past the delivery timeout) and committed before any
-- network I/O, like the callback outbox: no lock is held while a server thinks.
WITH due AS (
    SELECT id
    FROM notification_messages
    WHERE status = 'pending'
      AND next_attempt_at <= now()
    ORDER BY created_at, id
    -- The LIMIT is a sub-select, so a plan is costed alike with or without its
    -- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
    LIMIT (SELECT %(limit)s::integer)
    FOR UPDATE SKIP LOCKED
)
UPDATE notification_messages AS m
SET next_attempt_at = now() + make_interval(secs => %(lease_seconds)s)
-- The claimed rows by primary key, as an InitPlan's array (as
-- sql/callbacks/claim_due.sql, which says why).
WHERE m.id = ANY(ARRAY(SELECT id FROM due))
RETURNING m.id, m.route, m.kind, m.severity, m.subject, m.body, m.payload, m.attempts,
          m.max_attempts, m.message_timestamp, m.message_nonce, m.created_at
