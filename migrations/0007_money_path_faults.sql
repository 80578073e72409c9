-- Money-path correctness under faults (issue 10).
--
-- 1. node_recovery paces undecidable nodes: an UNKNOWN node whose recover()
--    cannot tell yet gets a next attempt time (backoff per node), so neither
--    this process nor another asks the provider again at once.
-- 2. A node whose recover() proves that nothing happened under its attempt's
--    idempotency key goes back to READY for a new attempt (bounded by
--    MG_NODE_MAX_ATTEMPTS), from SUBMITTING (crash or lost connection between
--    the write-ahead commit and submit) or from UNKNOWN. Beyond the reference,
--    which ends such a node FAILED.

ALTER TABLE movement_request_nodes
    ADD COLUMN recover_attempts integer NOT NULL DEFAULT 0 CHECK (recover_attempts >= 0),
    ADD COLUMN next_recover_at  timestamptz;

INSERT INTO node_state_transitions (from_state, to_state) VALUES
    ('SUBMITTING', 'READY'),
    ('UNKNOWN',    'READY');

-- Claims filter on the deployment's network class (MG_NETWORK_CLASS).
CREATE INDEX movement_requests_class_state_created
    ON movement_requests (network_class, request_state, created_at);
