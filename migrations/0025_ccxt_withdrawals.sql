-- Issue 28 item 3: the ccxt executor's write-ahead record of a cex_withdrawal attempt.
--
-- One row per node attempt, committed BEFORE the withdraw request leaves: a crash
-- (kill -9) after the request but before SUBMITTED is recorded leaves this row, and
-- recover() looks the withdrawal up at the venue by `client_id` (the venue's
-- client-side id, derived from the attempt's idempotency key). No row means the
-- request was never sent: the only local proof of "nothing happened".
-- `absent_seen_at` is the first time the venue's history, read after the grace,
-- did not show the withdrawal: one "not found" is not proof, a second one later is.
CREATE TABLE ccxt_withdrawal_attempts (
    request_node_id uuid NOT NULL REFERENCES movement_request_nodes (id),
    attempt_no integer NOT NULL CHECK (attempt_no >= 1),
    venue text NOT NULL,
    client_id text NOT NULL UNIQUE,
    asset text NOT NULL,
    amount numeric NOT NULL CHECK (amount > 0),
    address text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now(),
    withdrawal_id text,
    absent_seen_at timestamptz,
    PRIMARY KEY (request_node_id, attempt_no)
);
