-- updated_at is the time of the change itself, not of its transaction's start.
--
-- now() is the transaction's start: a dispatch transaction that spends long in
-- preflight/prepare/sign (a remote HSM signer, say) stamped its SUBMITTING row
-- with a time already past node_recovery's grace cutoff, and recovery could
-- take a node whose submit had not even been called. clock_timestamp() also
-- orders recovery's "longest idle first" by when nodes really went idle.

CREATE OR REPLACE FUNCTION qtg_guard_node_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.node_state <> 'BLOCKED' THEN
            RAISE EXCEPTION 'node % must be created BLOCKED, not %', NEW.node_key, NEW.node_state
                USING ERRCODE = 'QT001';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.node_state IS DISTINCT FROM OLD.node_state AND NOT EXISTS (
        SELECT 1 FROM node_state_transitions
        WHERE from_state = OLD.node_state AND to_state = NEW.node_state
    ) THEN
        RAISE EXCEPTION 'node % (%): transition % -> % is not allowed',
            OLD.node_key, OLD.id, OLD.node_state, NEW.node_state
            USING ERRCODE = 'QT001';
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION qtg_guard_request_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.request_state <> 'PENDING_APPROVAL' THEN
            RAISE EXCEPTION 'movement request must be created PENDING_APPROVAL, not %',
                NEW.request_state USING ERRCODE = 'QT001';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.request_state IS DISTINCT FROM OLD.request_state AND NOT EXISTS (
        SELECT 1 FROM request_state_transitions
        WHERE from_state = OLD.request_state AND to_state = NEW.request_state
    ) THEN
        RAISE EXCEPTION 'movement request %: transition % -> % is not allowed',
            OLD.id, OLD.request_state, NEW.request_state
            USING ERRCODE = 'QT001';
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END;
$$;
