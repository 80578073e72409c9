-- CCIP send intents (issue 12; the reference's ccip_send_intent).
--
-- A write-ahead row per ccip_send node attempt, committed before ccipSend is
-- broadcast, carrying the lane (source and destination chain selectors, router),
-- token, amount, fee, the idempotency key and the signed transaction's hash and
-- nonce (evidence to look up after a crash). States and allowed transitions:
--   pending                  written ahead; the broadcast may or may not have happened
--   broadcast                the node accepted eth_sendRawTransaction
--   sent                     mined; message_id read from the send's logs
--   success / failure / manual_execution_needed
--                            the destination's execution state of the message (final;
--                            manual_execution_needed may still become success). An
--                            OffRamp's FAILURE (3) reads as manual_execution_needed, since
--                            CCIP lets a person execute it; failure is for a message known
--                            never to execute (recorded by an operator or a sidecar)
--   reverted                 the ccipSend transaction reverted: no message (final)
--   released                 provably never sent (final): the nonce went elsewhere or
--                            recovery found nothing on chain while holding the node
--   stranded                 aged past MG_CCIP_SEND_INTENT_STRANDED_SECONDS and the
--                            chain could not tell: a person was asked (request_attention)
-- Like the node states, the list lives in the database, so every writer obeys it.
CREATE TABLE ccip_send_intent_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO ccip_send_intent_transitions (from_state, to_state) VALUES
    ('pending',   'broadcast'),
    ('pending',   'sent'),
    ('pending',   'reverted'),
    ('pending',   'released'),
    ('pending',   'stranded'),
    ('broadcast', 'sent'),
    ('broadcast', 'reverted'),
    ('broadcast', 'released'),
    ('broadcast', 'stranded'),
    ('sent',      'success'),
    ('sent',      'failure'),
    ('sent',      'manual_execution_needed'),
    ('sent',      'stranded'),
    ('manual_execution_needed', 'success'),
    ('stranded',  'sent'),
    ('stranded',  'reverted'),
    ('stranded',  'released'),
    ('stranded',  'success'),
    ('stranded',  'failure'),
    ('stranded',  'manual_execution_needed');

CREATE TABLE ccip_send_intents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_node_id  uuid NOT NULL REFERENCES movement_request_nodes (id),
    attempt_no       integer NOT NULL CHECK (attempt_no >= 1),
    idempotency_key  text NOT NULL UNIQUE,
    lane             text NOT NULL,
    chain_id         bigint NOT NULL CHECK (chain_id > 0),
    source_selector  numeric(20, 0) NOT NULL CHECK (source_selector >= 0),
    dest_selector    numeric(20, 0) NOT NULL CHECK (dest_selector >= 0),
    router           text NOT NULL CHECK (router ~ '^0x[0-9a-f]{40}$'),
    sender           text NOT NULL CHECK (sender ~ '^0x[0-9a-f]{40}$'),
    receiver         text NOT NULL CHECK (receiver ~ '^0x[0-9a-f]{40}$'),
    token            text NOT NULL CHECK (token ~ '^0x[0-9a-f]{40}$'),
    amount           numeric(78, 0) NOT NULL CHECK (amount > 0),
    fee_token        text CHECK (fee_token ~ '^0x[0-9a-f]{40}$'),  -- NULL: native
    fee              numeric(78, 0) NOT NULL CHECK (fee >= 0),
    nonce            bigint NOT NULL CHECK (nonce >= 0),
    tx_hash          text NOT NULL CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    block_number     bigint,
    message_id       text CHECK (message_id ~ '^0x[0-9a-f]{64}$'),
    dest_tx_hash     text CHECK (dest_tx_hash ~ '^0x[0-9a-f]{64}$'),
    state            text NOT NULL DEFAULT 'pending',
    state_detail     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (state NOT IN ('sent', 'success', 'failure', 'manual_execution_needed')
           OR message_id IS NOT NULL)
);
-- one live intent per node attempt
CREATE UNIQUE INDEX ccip_send_intents_attempt ON ccip_send_intents (request_node_id, attempt_no);
-- ccip_stranded_reaper's scan: unresolved intents by age
CREATE INDEX ccip_send_intents_unresolved
    ON ccip_send_intents (updated_at) WHERE state IN ('pending', 'broadcast', 'sent');

CREATE FUNCTION qtg_guard_ccip_send_intent_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION 'ccip send intent must be created pending, not %', NEW.state
                USING ERRCODE = 'QT001';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT EXISTS (
        SELECT 1 FROM ccip_send_intent_transitions
        WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'ccip send intent %: transition % -> % is not allowed',
            OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'QT001';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
CREATE TRIGGER ccip_send_intents_guard
    BEFORE INSERT OR UPDATE ON ccip_send_intents
    FOR EACH ROW EXECUTE FUNCTION qtg_guard_ccip_send_intent_state();
