-- Issue 25 items 1 and 2: an undecided node pages once, and operators can settle
-- it by hand, four-eyes.
--
-- movement_node_attention: one row per node attempt that was put in front of a
-- person because recovery could not decide it for MG_NODE_UNKNOWN_ATTENTION_SECONDS
-- (UNKNOWN, or SUBMITTING past its grace). The row is the "once": a resumed
-- movement is not paged again for the same attempt. A row of its own rather than
-- a column on the node: writing it takes no lock on the node row (only the
-- foreign key's KEY SHARE), so a node whose submit hangs — its row held by the
-- dispatcher — still pages, and the sweep never waits for a worker.
CREATE TABLE movement_node_attention (
    node_id           uuid NOT NULL REFERENCES movement_request_nodes (id),
    attempt_no        integer NOT NULL,
    request_id        uuid NOT NULL REFERENCES movement_requests (id),
    node_key          text NOT NULL,
    node_state        text NOT NULL,
    undecided_seconds double precision NOT NULL,
    raised_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, attempt_no)
);
CREATE INDEX movement_node_attention_request ON movement_node_attention (request_id);

-- movement_node_resolutions: an operator's settlement of an UNKNOWN (or stranded
-- SUBMITTING) node, proposed by one principal and confirmed by another. At most
-- one open proposal per node; a proposal made for an earlier attempt or state
-- episode is superseded, never confirmed. Four-eyes is also a CHECK here.
CREATE TABLE movement_node_resolutions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id       uuid NOT NULL REFERENCES movement_requests (id),
    node_id          uuid NOT NULL REFERENCES movement_request_nodes (id),
    node_key         text NOT NULL,
    attempt_no       integer NOT NULL,
    node_state       text NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('COMPLETED', 'FAILED')),
    evidence         text NOT NULL CHECK (length(evidence) BETWEEN 1 AND 2000),
    provider_refs    jsonb NOT NULL DEFAULT '{}'::jsonb,
    status           text NOT NULL DEFAULT 'proposed'
                     CHECK (status IN ('proposed', 'confirmed', 'superseded')),
    proposed_by      text NOT NULL,
    proposed_at      timestamptz NOT NULL DEFAULT now(),
    confirmed_by     text,
    confirm_evidence text,
    decided_at       timestamptz,
    CHECK (confirmed_by IS DISTINCT FROM proposed_by),
    CHECK ((status = 'confirmed') = (confirmed_by IS NOT NULL))
);
CREATE UNIQUE INDEX movement_node_resolutions_open
    ON movement_node_resolutions (node_id) WHERE status = 'proposed';
CREATE INDEX movement_node_resolutions_request ON movement_node_resolutions (request_id, id);
