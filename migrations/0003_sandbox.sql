-- The sandbox provider's "remote system" (DESIGN §5). These tables stand for
-- what an exchange or a chain would keep on its side: they are written only by
-- qtg/providers/sandbox, each call in its own transaction (never the caller's),
-- and nothing in qtg's own schema points at them. That separation is what lets
-- recover() answer "did it happen?" truthfully after a crash.

-- One row per side effect, keyed by the idempotency key the dispatcher sends.
CREATE TABLE sandbox_submissions (
    idempotency_key   text PRIMARY KEY,
    request_id        text NOT NULL,
    request_node_id   text NOT NULL,
    attempt_no        integer NOT NULL,
    action_type       text NOT NULL,
    payload_hash      text NOT NULL CHECK (payload_hash ~ '^[0-9a-f]{64}$'),
    signature         text,
    provider_refs     jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- what the provider reports once its observations are complete
    artifacts         jsonb NOT NULL DEFAULT '{}'::jsonb,
    observe_count     integer NOT NULL DEFAULT 0 CHECK (observe_count >= 0),
    -- submit() calls that arrived with a key already used: no second side
    -- effect happened, and tests use this count to prove nobody re-submitted
    duplicate_submits integer NOT NULL DEFAULT 0 CHECK (duplicate_submits >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_submissions_node ON sandbox_submissions (request_node_id);

-- Observe-only nodes have no submission: their observations are counted here.
CREATE TABLE sandbox_observations (
    request_node_id text PRIMARY KEY,
    observe_count   integer NOT NULL DEFAULT 0 CHECK (observe_count >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
