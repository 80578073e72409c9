-- Reference §4's claim (pending, FIFO by created_at, SKIP LOCKED), restricted
-- to rows that are due, and turned into a lease: next_attempt_at moves past
-- the HTTP timeout so that the row stays invisible to every dispatcher while
-- this one sends it *after committing* — no row lock or transaction is held
-- across HTTP. If the sender dies mid-flight the lease runs out and the row is
-- sent again (delivery is at-least-once; receivers dedupe by nonce).
WITH due AS (
    SELECT o.id
    FROM movement_callback_outbox o
    JOIN movement_requests r ON r.id = o.request_id
    WHERE o.status = 'pending'
      AND o.next_attempt_at <= now()
      AND r.network_class = %(network_class)s
    ORDER BY o.created_at ASC, o.id ASC
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE movement_callback_outbox AS o
SET next_attempt_at = now() + make_interval(secs => %(lease_seconds)s)
FROM due
WHERE o.id = due.id
RETURNING o.id, o.request_id, o.event_id, o.event_type, o.callback_url, o.payload,
          o.callback_signature,
          o.attempts, o.max_attempts, o.callback_timestamp, o.callback_nonce, o.created_at
