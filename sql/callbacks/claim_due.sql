-- Reference §4's claim (pending, FIFO by created_at, SKIP LOCKED), restricted
-- to rows that are due, and turned into a lease: next_attempt_at moves past
-- the HTTP timeout so that the row stays invisible to every dispatcher while
-- this one sends it *after committing* — no row lock or transaction is held
-- across HTTP. If the sender dies mid-flight the lease runs out and the row is
-- sent again (delivery is at-least-once; receivers dedupe by nonce).
--
-- A walk of movement_callback_outbox_pending (created_at) stopping at its LIMIT,
-- each row's request by primary key only (a LATERAL sub-select, its test wrapped
-- in IS TRUE; the due test too, so no other partial index offers a bitmap scan
-- and a sort of every pending row): the plan holds on stale statistics, where
-- it hash-joined every pending row with every request of the class (issue 29).
WITH due AS (
    SELECT o.id
    FROM movement_callback_outbox o
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = o.request_id
          AND (r.network_class = %(network_class)s) IS TRUE
        OFFSET 0
    ) r
    WHERE o.status = 'pending'
      AND (o.next_attempt_at <= now()) IS TRUE
    ORDER BY o.created_at ASC, o.id ASC
    -- The LIMIT is a sub-select, so a plan is costed alike with or without its
    -- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
    LIMIT (SELECT %(limit)s::integer)
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE movement_callback_outbox AS o
SET next_attempt_at = now() + make_interval(secs => %(lease_seconds)s)
-- The claimed rows by primary key, as an InitPlan's array: joined to `due`, a
-- generic plan (which estimates a tenth of the pending rows for the LIMIT)
-- hash-joined `due` with a seq scan of the whole outbox, sent rows included
-- (9.5 ms on tests/test_plans.py's burst with fresh statistics, against 0.2).
WHERE o.id = ANY(ARRAY(SELECT id FROM due))
RETURNING o.id, o.request_id, o.event_id, o.event_type, o.callback_url, o.payload,
          o.callback_signature,
          o.attempts, o.max_attempts, o.callback_timestamp, o.callback_nonce, o.created_at
