-- State guards, the event log, callback fan-out and NOTIFY wake-ups.
--
-- Why in the database: a state machine is only safe if *every* writer obeys
-- it, including a hand-written UPDATE at 3 a.m.; and an event that is written
-- by the same trigger as the state change can never be forgotten by a code
-- path. Errors raised here use SQLSTATE QT001 (illegal transition) so the
-- application can map them to a 409 without parsing messages.

-- ------------------------------------------------------------ state guards

CREATE FUNCTION qtg_guard_node_state() RETURNS trigger
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
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
CREATE TRIGGER movement_request_nodes_guard
    BEFORE INSERT OR UPDATE ON movement_request_nodes
    FOR EACH ROW EXECUTE FUNCTION qtg_guard_node_state();

CREATE FUNCTION qtg_guard_request_state() RETURNS trigger
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
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
CREATE TRIGGER movement_requests_guard
    BEFORE INSERT OR UPDATE ON movement_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_guard_request_state();

CREATE FUNCTION qtg_touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
CREATE TRIGGER template_proposals_touch BEFORE UPDATE ON template_proposals
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();
CREATE TRIGGER movement_callback_outbox_touch BEFORE UPDATE ON movement_callback_outbox
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();
CREATE TRIGGER executors_touch BEFORE UPDATE ON executors
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();
CREATE TRIGGER signers_touch BEFORE UPDATE ON signers
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();

-- --------------------------------------------------------------- notify

-- Work channels carry an empty payload on purpose: PostgreSQL folds identical
-- notifications within one transaction, so approving 500 requests in one
-- transaction sends one qtg_dispatch, and the hub coalesces the rest.
-- `SET qtg.notify = off` (per session or database) silences them, which is
-- how the benchmarks price reactivity.
CREATE FUNCTION qtg_notify(channel text, payload text DEFAULT '') RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('qtg.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify(channel, payload);
    END IF;
END;
$$;

-- ------------------------------------------ events, callbacks, wake-ups

CREATE FUNCTION qtg_record_event(
    p_request_id uuid, p_node_id uuid, p_node_key text, p_event_type text,
    p_from text, p_to text, p_payload jsonb
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO movement_events (request_id, node_id, node_key, event_type, from_state, to_state, payload)
    VALUES (p_request_id, p_node_id, p_node_key, p_event_type, p_from, p_to, p_payload);
END;
$$;

CREATE FUNCTION qtg_after_node_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.node_state IS DISTINCT FROM OLD.node_state THEN
        PERFORM qtg_record_event(
            NEW.request_id, NEW.id, NEW.node_key, 'node_state_changed',
            OLD.node_state, NEW.node_state,
            jsonb_strip_nulls(jsonb_build_object(
                'action_type', NEW.action_type,
                'attempt_no', NEW.attempt_no,
                'error_code', NEW.error_code)));
    END IF;
    IF NEW.node_state = 'READY'
       AND (TG_OP = 'INSERT' OR OLD.node_state <> 'READY') THEN
        PERFORM qtg_notify('qtg_dispatch');
    ELSIF NEW.node_state IN ('SUBMITTED', 'OBSERVING')
       AND (TG_OP = 'INSERT'
            OR OLD.node_state NOT IN ('SUBMITTED', 'OBSERVING')
            OR NEW.next_observe_at < OLD.next_observe_at
            OR (NEW.next_observe_at IS NULL AND OLD.next_observe_at IS NOT NULL)) THEN
        PERFORM qtg_notify('qtg_observe');
    ELSIF NEW.node_state = 'UNKNOWN'
       AND (TG_OP = 'INSERT' OR OLD.node_state <> 'UNKNOWN') THEN
        PERFORM qtg_notify('qtg_recover');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_request_nodes_after
    AFTER INSERT OR UPDATE ON movement_request_nodes
    FOR EACH ROW EXECUTE FUNCTION qtg_after_node_change();

CREATE FUNCTION qtg_after_request_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_created', NULL, NEW.request_state,
            jsonb_build_object('template_version_id', NEW.template_version_id));
    ELSE
        IF NEW.request_state IS DISTINCT FROM OLD.request_state THEN
            PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_state_changed',
                OLD.request_state, NEW.request_state, '{}'::jsonb);
            IF NEW.request_state = 'MANUAL_INTERVENTION' THEN
                PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_attention',
                    OLD.request_state, NEW.request_state,
                    jsonb_build_object('reason', 'manual intervention required'));
            END IF;
        END IF;
        IF NEW.current_frontier IS DISTINCT FROM OLD.current_frontier THEN
            PERFORM qtg_record_event(NEW.id, NULL, NULL, 'frontier_advanced', NULL, NULL,
                jsonb_build_object('frontier', to_jsonb(NEW.current_frontier)));
        END IF;
    END IF;
    IF NEW.request_state IN ('APPROVED', 'EXECUTING')
       AND (TG_OP = 'INSERT' OR OLD.request_state IS DISTINCT FROM NEW.request_state) THEN
        PERFORM qtg_notify('qtg_dispatch');
    END IF;
    IF NEW.request_state = 'PENDING_APPROVAL' AND NEW.expires_at IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.expires_at IS DISTINCT FROM NEW.expires_at) THEN
        PERFORM qtg_notify('qtg_expire');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_requests_after
    AFTER INSERT OR UPDATE ON movement_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_after_request_change();

-- Every event of a request that has a callback_url becomes a pending
-- callback in the same transaction. max_attempts comes from the session
-- setting qtg.callback_max_attempts (the pool sets it from
-- MG_CALLBACK_MAX_ATTEMPTS), else the reference's default of 5.
CREATE FUNCTION qtg_after_event_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_url text;
BEGIN
    SELECT callback_url INTO v_url FROM movement_requests WHERE id = NEW.request_id;
    IF v_url IS NOT NULL THEN
        INSERT INTO movement_callback_outbox (request_id, event_id, event_type, callback_url, payload, max_attempts)
        VALUES (NEW.request_id, NEW.id, NEW.event_type, v_url,
            jsonb_build_object(
                'event_id', NEW.id,
                'event_type', NEW.event_type,
                'request_id', NEW.request_id,
                'node_key', NEW.node_key,
                'from_state', NEW.from_state,
                'to_state', NEW.to_state,
                'data', NEW.payload,
                'occurred_at', NEW.created_at),
            coalesce(nullif(current_setting('qtg.callback_max_attempts', true), '')::integer, 5));
    END IF;
    PERFORM qtg_notify('qtg_events', NEW.id::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_events_after
    AFTER INSERT ON movement_events
    FOR EACH ROW EXECUTE FUNCTION qtg_after_event_insert();

CREATE FUNCTION qtg_after_callback_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending'
       AND (TG_OP = 'INSERT' OR OLD.status <> 'pending') THEN
        PERFORM qtg_notify('qtg_callback');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_callback_outbox_after
    AFTER INSERT OR UPDATE ON movement_callback_outbox
    FOR EACH ROW EXECUTE FUNCTION qtg_after_callback_change();

CREATE FUNCTION qtg_after_audit_outbox_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qtg_notify('qtg_audit');
    RETURN NULL;
END;
$$;
CREATE TRIGGER audit_outbox_after
    AFTER INSERT ON audit_outbox
    FOR EACH ROW EXECUTE FUNCTION qtg_after_audit_outbox_insert();

CREATE FUNCTION qtg_after_proposal_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.proposal_state = 'PENDING_REVIEW' AND NEW.expires_at IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.expires_at IS DISTINCT FROM NEW.expires_at) THEN
        PERFORM qtg_notify('qtg_expire');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER template_proposals_after
    AFTER INSERT OR UPDATE ON template_proposals
    FOR EACH ROW EXECUTE FUNCTION qtg_after_proposal_change();
