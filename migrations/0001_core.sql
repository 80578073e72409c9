-- qtg core schema (DESIGN §2). Forward-only; applied once by `qtg migrate`.
-- Every state column accepts only its states, and a trigger refuses every
-- state change that is not listed in node_state_transitions /
-- request_state_transitions (the same lists live in qtg/domain/states.py; a
-- test proves they agree).

-- ---------------------------------------------------------------- states

CREATE TABLE node_state_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);

CREATE TABLE request_state_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);

INSERT INTO node_state_transitions (from_state, to_state) VALUES
    ('BLOCKED',    'READY'),
    ('BLOCKED',    'SKIPPED'),
    ('READY',      'SUBMITTING'),
    ('READY',      'OBSERVING'),
    ('READY',      'COMPLETED'),
    ('READY',      'FAILED'),
    ('READY',      'SKIPPED'),
    ('SUBMITTING', 'SUBMITTED'),
    ('SUBMITTING', 'COMPLETED'),
    ('SUBMITTING', 'FAILED'),
    ('SUBMITTING', 'UNKNOWN'),
    ('SUBMITTED',  'OBSERVING'),
    ('SUBMITTED',  'COMPLETED'),
    ('SUBMITTED',  'FAILED'),
    ('SUBMITTED',  'UNKNOWN'),
    ('OBSERVING',  'COMPLETED'),
    ('OBSERVING',  'FAILED'),
    ('OBSERVING',  'UNKNOWN'),
    ('UNKNOWN',    'SUBMITTED'),
    ('UNKNOWN',    'OBSERVING'),
    ('UNKNOWN',    'COMPLETED'),
    ('UNKNOWN',    'FAILED'),
    ('FAILED',     'READY');

INSERT INTO request_state_transitions (from_state, to_state) VALUES
    ('PENDING_APPROVAL',      'APPROVED'),
    ('PENDING_APPROVAL',      'REJECTED'),
    ('PENDING_APPROVAL',      'EXPIRED'),
    ('PENDING_APPROVAL',      'CANCELLED'),
    ('APPROVED',              'EXECUTING'),
    ('APPROVED',              'WAITING_MANUAL_ACTION'),
    ('APPROVED',              'FAILED'),
    ('APPROVED',              'CANCELLED'),
    ('EXECUTING',             'COMPLETED'),
    ('EXECUTING',             'FAILED'),
    ('EXECUTING',             'MANUAL_INTERVENTION'),
    ('EXECUTING',             'WAITING_MANUAL_ACTION'),
    ('EXECUTING',             'CANCELLED'),
    ('WAITING_MANUAL_ACTION', 'EXECUTING'),
    ('WAITING_MANUAL_ACTION', 'COMPLETED'),
    ('WAITING_MANUAL_ACTION', 'FAILED'),
    ('WAITING_MANUAL_ACTION', 'MANUAL_INTERVENTION'),
    ('WAITING_MANUAL_ACTION', 'CANCELLED'),
    ('MANUAL_INTERVENTION',   'EXECUTING'),
    ('MANUAL_INTERVENTION',   'CANCELLED'),
    ('FAILED',                'EXECUTING');

-- ------------------------------------------------------------- templates

CREATE TABLE movement_templates (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    template_key text NOT NULL UNIQUE CHECK (template_key ~ '^[a-z0-9][a-z0-9_.-]{0,127}$'),
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE template_versions (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    template_id   uuid NOT NULL REFERENCES movement_templates (id),
    version       integer NOT NULL CHECK (version >= 1),
    graph         jsonb NOT NULL,
    graph_hash    text NOT NULL,
    risk_controls jsonb NOT NULL DEFAULT '{}'::jsonb,
    status        text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'RETIRED')),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (template_id, version)
);
-- At most one ACTIVE version per template.
CREATE UNIQUE INDEX template_versions_one_active
    ON template_versions (template_id) WHERE status = 'ACTIVE';

CREATE TABLE plan_nodes (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    template_version_id uuid NOT NULL REFERENCES template_versions (id),
    node_key            text NOT NULL,
    node_kind           text NOT NULL CHECK (node_kind IN ('action', 'observe', 'manual')),
    action_type         text NOT NULL,
    executor_key        text,
    config              jsonb NOT NULL DEFAULT '{}'::jsonb,
    timeout_policy      jsonb NOT NULL DEFAULT '{}'::jsonb,
    position            integer NOT NULL,
    UNIQUE (template_version_id, node_key)
);

CREATE TABLE plan_edges (
    template_version_id uuid NOT NULL REFERENCES template_versions (id),
    from_node_id        uuid NOT NULL REFERENCES plan_nodes (id),
    to_node_id          uuid NOT NULL REFERENCES plan_nodes (id),
    PRIMARY KEY (template_version_id, from_node_id, to_node_id),
    CHECK (from_node_id <> to_node_id)
);
CREATE INDEX plan_edges_from ON plan_edges (from_node_id);
CREATE INDEX plan_edges_to ON plan_edges (to_node_id);

CREATE TABLE template_proposals (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    template_key        text NOT NULL,
    name                text NOT NULL,
    description         text NOT NULL DEFAULT '',
    graph               jsonb NOT NULL,
    risk_controls       jsonb NOT NULL DEFAULT '{}'::jsonb,
    proposal_state      text NOT NULL DEFAULT 'PENDING_REVIEW'
        CHECK (proposal_state IN ('PENDING_REVIEW', 'APPROVED', 'REJECTED', 'EXPIRED')),
    proposed_by         text NOT NULL,
    reviewed_by         text,
    review_note         text,
    template_version_id uuid REFERENCES template_versions (id),
    expires_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX template_proposals_pending_expiry
    ON template_proposals (expires_at) WHERE proposal_state = 'PENDING_REVIEW';

-- -------------------------------------------------------------- movements

CREATE TABLE movement_requests (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    network_class       text NOT NULL,
    template_id         uuid NOT NULL REFERENCES movement_templates (id),
    template_version_id uuid NOT NULL REFERENCES template_versions (id),
    compiled_plan_hash  text NOT NULL,
    intent              jsonb NOT NULL,
    input_params        jsonb NOT NULL DEFAULT '{}'::jsonb,
    request_state       text NOT NULL DEFAULT 'PENDING_APPROVAL' CHECK (request_state IN (
        'PENDING_APPROVAL', 'APPROVED', 'REJECTED', 'EXPIRED', 'EXECUTING',
        'WAITING_MANUAL_ACTION', 'MANUAL_INTERVENTION', 'COMPLETED', 'FAILED', 'CANCELLED')),
    current_frontier    text[] NOT NULL DEFAULT '{}',
    idempotency_key     text NOT NULL UNIQUE,
    -- sha256 of the canonical create body: same key + same body = same request
    request_fingerprint text NOT NULL,
    callback_url        text,
    created_by          text NOT NULL,
    approved_by         text,
    decided_by          text,
    expires_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- four-eyes (DESIGN §7): the creator never approves
    CHECK (approved_by IS NULL OR approved_by <> created_by)
);
CREATE INDEX movement_requests_state_created ON movement_requests (request_state, created_at);
CREATE INDEX movement_requests_pending_expiry
    ON movement_requests (expires_at) WHERE request_state = 'PENDING_APPROVAL';
CREATE INDEX movement_requests_created ON movement_requests (created_at, id);

CREATE TABLE movement_request_nodes (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    request_id      uuid NOT NULL REFERENCES movement_requests (id),
    plan_node_id    uuid NOT NULL REFERENCES plan_nodes (id),
    node_key        text NOT NULL,
    -- copied from the plan node so that claim queries and recovery lanes need no join
    node_kind       text NOT NULL CHECK (node_kind IN ('action', 'observe', 'manual')),
    action_type     text NOT NULL,
    node_state      text NOT NULL CHECK (node_state IN (
        'BLOCKED', 'READY', 'SUBMITTING', 'SUBMITTED', 'OBSERVING',
        'COMPLETED', 'SKIPPED', 'FAILED', 'UNKNOWN')),
    attempt_no      integer NOT NULL DEFAULT 0 CHECK (attempt_no >= 0),
    -- write-ahead idempotency key of the current attempt: request node id + attempt
    idempotency_key text,
    started_at      timestamptz,
    submitted_at    timestamptz,
    completed_at    timestamptz,
    next_observe_at timestamptz,
    observe_count   integer NOT NULL DEFAULT 0,
    provider_refs   jsonb NOT NULL DEFAULT '{}'::jsonb,
    artifacts       jsonb NOT NULL DEFAULT '{}'::jsonb,
    prepared_action jsonb,
    error_code      text,
    error_detail    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (request_id, node_key)
);
CREATE INDEX movement_request_nodes_request ON movement_request_nodes (request_id);
-- claim indexes: one partial index per claimed state family
CREATE INDEX movement_request_nodes_ready
    ON movement_request_nodes (request_id) WHERE node_state = 'READY';
CREATE INDEX movement_request_nodes_observable
    ON movement_request_nodes (next_observe_at) WHERE node_state IN ('SUBMITTED', 'OBSERVING');
CREATE INDEX movement_request_nodes_recoverable
    ON movement_request_nodes (updated_at) WHERE node_state IN ('UNKNOWN', 'SUBMITTING');

-- -------------------------------------------------------- events, outboxes

-- The durable, ordered log of every request/node state change and frontier
-- advance (DESIGN §2, beyond). xact_id lets readers that page "after id N"
-- wait for transactions that are still open (DESIGN §9, sequence ids are not
-- commit order).
CREATE TABLE movement_events (
    id          bigserial PRIMARY KEY,
    request_id  uuid NOT NULL REFERENCES movement_requests (id),
    node_id     uuid REFERENCES movement_request_nodes (id),
    node_key    text,
    event_type  text NOT NULL,
    from_state  text,
    to_state    text,
    payload     jsonb NOT NULL DEFAULT '{}'::jsonb,
    xact_id     xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX movement_events_request ON movement_events (request_id, id);

CREATE TABLE movement_callback_outbox (
    id                 bigserial PRIMARY KEY,
    request_id         uuid NOT NULL REFERENCES movement_requests (id),
    event_id           bigint REFERENCES movement_events (id),
    event_type         text NOT NULL,
    callback_url       text NOT NULL,
    payload            jsonb NOT NULL,
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dlq')),
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts       integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    -- chosen once per row and reused on every retry (reference §4)
    callback_timestamp bigint NOT NULL DEFAULT floor(extract(epoch FROM now()))::bigint,
    callback_nonce     text NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', ''),
    last_error         text,
    last_status_code   integer,
    sent_at            timestamptz,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX movement_callback_outbox_pending
    ON movement_callback_outbox (created_at) WHERE status = 'pending';
CREATE INDEX movement_callback_outbox_pending_due
    ON movement_callback_outbox (next_attempt_at) WHERE status = 'pending';

CREATE TABLE audit_outbox (
    id          bigserial PRIMARY KEY,
    actor       text NOT NULL,
    action      text NOT NULL,
    object_type text NOT NULL,
    object_id   text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb,
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Append-only and hash-chained (DESIGN §2, beyond): row_hash covers the row's
-- content and prev_hash, so editing or deleting any row breaks the chain.
CREATE TABLE audit_events (
    id          bigserial PRIMARY KEY,
    outbox_id   bigint NOT NULL UNIQUE,
    actor       text NOT NULL,
    action      text NOT NULL,
    object_type text NOT NULL,
    object_id   text NOT NULL,
    detail      jsonb NOT NULL,
    occurred_at timestamptz NOT NULL,
    promoted_at timestamptz NOT NULL DEFAULT now(),
    prev_hash   text NOT NULL,
    row_hash    text NOT NULL UNIQUE
);
CREATE INDEX audit_events_object ON audit_events (object_type, object_id, id);

CREATE FUNCTION qtg_audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION qtg_audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_audit_events_append_only();

-- ------------------------------------------------ providers, workers, auth

CREATE TABLE executors (
    executor_key   text PRIMARY KEY,
    action_types   text[] NOT NULL DEFAULT '{}',
    health_state   text NOT NULL DEFAULT 'unknown'
        CHECK (health_state IN ('unknown', 'healthy', 'degraded', 'unhealthy')),
    health_detail  jsonb NOT NULL DEFAULT '{}'::jsonb,
    last_health_at timestamptz,
    registered     boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE signers (
    signer_key              text PRIMARY KEY,
    health_state            text NOT NULL DEFAULT 'unknown'
        CHECK (health_state IN ('unknown', 'healthy', 'degraded', 'unhealthy')),
    health_detail           jsonb NOT NULL DEFAULT '{}'::jsonb,
    last_health_at          timestamptz,
    -- false once the runtime no longer registers this signer: the row is an orphan
    registered              boolean NOT NULL DEFAULT true,
    -- written only by the executor_health worker
    observed_signer_address text CHECK (observed_signer_address ~ '^0x[0-9a-f]{40}$'),
    observed_at             timestamptz,
    -- written only by PUT /v3/signers/{signer_key}/expected-identity
    expected_signer_address text CHECK (expected_signer_address ~ '^0x[0-9a-f]{40}$'),
    expected_set_by         text,
    expected_set_at         timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE worker_heartbeats (
    network_class      text NOT NULL,
    worker_name        text NOT NULL,
    worker_group       text NOT NULL CHECK (worker_group IN ('core', 'sidecar')),
    status             text NOT NULL DEFAULT 'starting'
        CHECK (status IN ('starting', 'running', 'backoff', 'crashed', 'stopped')),
    instance_id        text,
    interval_seconds   double precision NOT NULL,
    started_at         timestamptz,
    last_beat_at       timestamptz,
    last_success_at    timestamptz,
    iterations         bigint NOT NULL DEFAULT 0,
    items              bigint NOT NULL DEFAULT 0,
    consecutive_errors integer NOT NULL DEFAULT 0,
    last_error         text,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (network_class, worker_name)
);

CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL,
    -- sha256 of the token; the token itself is shown once and never stored
    token_hash   text NOT NULL UNIQUE,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
