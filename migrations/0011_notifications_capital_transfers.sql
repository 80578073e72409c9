-- Operator attention (issue 14): the notifications outbox and its delivery
-- state, and capital_transfer_requests.
--
-- A notification is written by a trigger (or by a service, through
-- qtg_raise_notification) in the same transaction as the event that needs a
-- person, so there is no such event without its notification, and no
-- notification for an event that rolled back. The notification_dispatcher
-- worker routes, rate-limits and delivers them (qtg/services/notifications.py).
--
-- Nothing here replaces a function of an earlier migration: every hook is a
-- trigger of its own, beside the existing ones.

-- ------------------------------------------------------------ notifications

CREATE TABLE notifications (
    id             bigserial PRIMARY KEY,
    kind           text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,63}$'),
    severity       text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    subject        text NOT NULL CHECK (length(subject) BETWEEN 1 AND 300),
    body           text NOT NULL DEFAULT '',
    -- what it is about: request_id, node_key(s), callback_id, worker, capital_transfer_id …
    links          jsonb NOT NULL DEFAULT '{}'::jsonb,
    request_id     uuid,
    node_key       text,
    -- the condition: while a row with this key is open (resolved_at IS NULL),
    -- raising it again only counts the occurrence; it does not page twice
    dedupe_key     text NOT NULL CHECK (length(dedupe_key) BETWEEN 1 AND 500),
    occurrences    integer NOT NULL DEFAULT 1,
    last_raised_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- set by the dispatcher once its deliveries (one per route) exist
    routed_at      timestamptz,
    resolved_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX notifications_open_dedupe ON notifications (dedupe_key) WHERE resolved_at IS NULL;
CREATE INDEX notifications_unrouted ON notifications (id) WHERE routed_at IS NULL;
CREATE INDEX notifications_request ON notifications (request_id) WHERE request_id IS NOT NULL;

-- One outbound message on one route: a single notification, or a digest of
-- many when the route's rate limit would otherwise be exceeded. Its body is
-- rendered once, and timestamp and nonce are chosen once, so every retry is
-- the same signed request (like movement_callback_outbox).
CREATE TABLE notification_messages (
    id                 bigserial PRIMARY KEY,
    route              text NOT NULL CHECK (route IN ('webhook', 'email')),
    kind               text NOT NULL CHECK (kind IN ('single', 'digest')),
    notification_count integer NOT NULL CHECK (notification_count >= 1),
    severity           text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    subject            text NOT NULL,
    body               text NOT NULL,
    payload            jsonb NOT NULL,
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dlq')),
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts       integer NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    message_timestamp  bigint NOT NULL DEFAULT floor(extract(epoch FROM now()))::bigint,
    message_nonce      text NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', ''),
    last_error         text,
    sent_at            timestamptz,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_messages_pending_due
    ON notification_messages (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notification_messages_route_created ON notification_messages (route, created_at);
CREATE TRIGGER notification_messages_touch BEFORE UPDATE ON notification_messages
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();

-- Which notification goes (went) to which route, in which message. A row
-- with no message_id is held: routed, waiting for the route's rate budget.
CREATE TABLE notification_deliveries (
    notification_id bigint NOT NULL REFERENCES notifications (id),
    route           text NOT NULL CHECK (route IN ('webhook', 'email')),
    message_id      bigint REFERENCES notification_messages (id),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (notification_id, route)
);
CREATE INDEX notification_deliveries_held
    ON notification_deliveries (route, notification_id) WHERE message_id IS NULL;
CREATE INDEX notification_deliveries_message ON notification_deliveries (message_id);

-- The hook. Anything that needs a person calls this in its own transaction:
--
--   SELECT qtg_raise_notification('drift_finding', 'critical', 'drift:' || finding_id,
--       'registry drift on ' || chain, evidence_text, jsonb_build_object('finding_id', id));
--
-- and qtg_resolve_notification(dedupe_key) when the condition clears, so the
-- next occurrence pages again. Python services use sql/notifications/raise.sql.
CREATE FUNCTION qtg_raise_notification(
    p_kind text, p_severity text, p_dedupe_key text, p_subject text,
    p_body text DEFAULT '', p_links jsonb DEFAULT '{}'::jsonb,
    p_request_id uuid DEFAULT NULL, p_node_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO notifications (kind, severity, subject, body, links, request_id, node_key, dedupe_key)
    VALUES (p_kind, p_severity, left(p_subject, 300), coalesce(p_body, ''),
            coalesce(p_links, '{}'::jsonb), p_request_id, p_node_key, p_dedupe_key)
    ON CONFLICT (dedupe_key) WHERE resolved_at IS NULL DO UPDATE
        SET occurrences = notifications.occurrences + 1,
            last_raised_at = clock_timestamp()
    RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;

CREATE FUNCTION qtg_resolve_notification(p_dedupe_key text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    UPDATE notifications SET resolved_at = clock_timestamp()
    WHERE dedupe_key = p_dedupe_key AND resolved_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- The dispatcher's wake-up: a new notification, or a message that became
-- pending (created or rescheduled) — rescheduled ones are found by next_due.
CREATE FUNCTION qtg_after_notification_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qtg_notify('qtg_notification');
    RETURN NULL;
END;
$$;
CREATE TRIGGER notifications_after AFTER INSERT ON notifications
    FOR EACH ROW EXECUTE FUNCTION qtg_after_notification_insert();

-- ---------------------------------------------------- the built-in sources

-- A movement that needs a person: every request_attention event (MANUAL_INTERVENTION,
-- whatever caused it) pages critical; a request entering FAILED pages warning.
-- Leaving either state resolves it, so breaking it again pages again.
CREATE FUNCTION qtg_notify_on_movement_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_template text;
    v_intent   jsonb;
    v_nodes    text[];
    v_errors   text;
    v_what     text;
BEGIN
    IF NEW.event_type = 'request_state_changed'
       AND NEW.from_state IN ('MANUAL_INTERVENTION', 'FAILED')
       AND NEW.to_state IS DISTINCT FROM NEW.from_state THEN
        PERFORM qtg_resolve_notification(
            CASE NEW.from_state WHEN 'FAILED' THEN 'request_failed:' ELSE 'request_attention:' END
            || NEW.request_id);
    END IF;
    IF NEW.event_type <> 'request_attention'
       AND NOT (NEW.event_type = 'request_state_changed' AND NEW.to_state = 'FAILED') THEN
        RETURN NULL;
    END IF;
    SELECT t.template_key, r.intent INTO v_template, v_intent
    FROM movement_requests r JOIN movement_templates t ON t.id = r.template_id
    WHERE r.id = NEW.request_id;
    SELECT array_agg(n.node_key ORDER BY n.node_key),
           string_agg(n.node_key || ': ' || n.node_state
                      || coalesce(' (' || n.error_code || ')', ''), E'\n' ORDER BY n.node_key)
    INTO v_nodes, v_errors
    FROM movement_request_nodes n
    WHERE n.request_id = NEW.request_id AND n.node_state IN ('FAILED', 'UNKNOWN');
    v_what := coalesce(v_intent ->> 'amount', '?') || ' ' || coalesce(v_intent ->> 'asset', '?')
              || ' to ' || coalesce(v_intent ->> 'destination', '?');
    IF NEW.event_type = 'request_attention' THEN
        PERFORM qtg_raise_notification(
            'request_attention', 'critical', 'request_attention:' || NEW.request_id,
            'movement ' || NEW.request_id || ' needs a person (MANUAL_INTERVENTION)',
            'Movement ' || NEW.request_id || ' (' || coalesce(v_template, '?') || ', '
                || v_what || ') is in MANUAL_INTERVENTION: '
                || coalesce(NEW.payload ->> 'reason', 'manual intervention required') || '.'
                || coalesce(E'\nNodes:\n' || v_errors, ''),
            jsonb_strip_nulls(jsonb_build_object(
                'request_id', NEW.request_id, 'node_keys', to_jsonb(v_nodes),
                'event_id', NEW.id, 'template_key', v_template)),
            NEW.request_id, v_nodes[1]);
    ELSE
        PERFORM qtg_raise_notification(
            'request_failed', 'warning', 'request_failed:' || NEW.request_id,
            'movement ' || NEW.request_id || ' FAILED',
            'Movement ' || NEW.request_id || ' (' || coalesce(v_template, '?') || ', '
                || v_what || ') FAILED; no side effect completed, so a node can be retried.'
                || coalesce(E'\nNodes:\n' || v_errors, ''),
            jsonb_strip_nulls(jsonb_build_object(
                'request_id', NEW.request_id, 'node_keys', to_jsonb(v_nodes),
                'event_id', NEW.id, 'template_key', v_template)),
            NEW.request_id, v_nodes[1]);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_events_notify AFTER INSERT ON movement_events
    FOR EACH ROW
    -- only the events that raise or resolve: most state changes never call the function
    WHEN (NEW.event_type = 'request_attention'
          OR (NEW.event_type = 'request_state_changed'
              AND (NEW.to_state = 'FAILED'
                   OR NEW.from_state IN ('MANUAL_INTERVENTION', 'FAILED'))))
    EXECUTE FUNCTION qtg_notify_on_movement_event();

-- A callback that reached dlq: one page per receiver (URL without its query)
-- while it keeps failing; a later successful delivery to it resolves it.
CREATE FUNCTION qtg_notify_on_callback_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_target text := split_part(split_part(NEW.callback_url, '?', 1), '#', 1);
BEGIN
    IF NEW.status = 'dlq' THEN
        PERFORM qtg_raise_notification(
            'callback_dlq', 'warning', 'callback_dlq:' || v_target,
            'callbacks to ' || left(v_target, 200) || ' are dead-lettered',
            'Callback ' || NEW.id || ' (' || NEW.event_type || ' of movement ' || NEW.request_id
                || ') gave up after ' || NEW.attempts || ' attempts: '
                || coalesce(NEW.last_error, 'no error recorded') || '.',
            jsonb_build_object('request_id', NEW.request_id, 'callback_id', NEW.id,
                               'callback_target', v_target),
            NEW.request_id, NULL);
    ELSIF NEW.status = 'sent' THEN
        PERFORM qtg_resolve_notification('callback_dlq:' || v_target);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_callback_outbox_notify AFTER UPDATE ON movement_callback_outbox
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('dlq', 'sent'))
    EXECUTE FUNCTION qtg_notify_on_callback_change();

-- A supervised worker that crashed (its heartbeat row marked crashed) pages
-- critical; the row leaving crashed (the worker started again) resolves it.
CREATE FUNCTION qtg_notify_on_heartbeat_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key text := 'worker_crashed:' || NEW.network_class || ':' || NEW.worker_name;
BEGIN
    IF NEW.status = 'crashed' THEN
        PERFORM qtg_raise_notification(
            'worker_crashed', 'critical', v_key,
            'worker ' || NEW.worker_name || ' crashed (' || NEW.network_class || ')',
            'The ' || NEW.worker_group || ' worker ' || NEW.worker_name || ' of network class '
                || NEW.network_class || ' on instance ' || coalesce(NEW.instance_id, '?')
                || ' stopped: ' || coalesce(NEW.last_error, 'no error recorded') || '.',
            jsonb_build_object('worker', NEW.worker_name, 'network_class', NEW.network_class,
                               'instance_id', NEW.instance_id));
    ELSIF OLD.status = 'crashed' THEN
        PERFORM qtg_resolve_notification(v_key);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER worker_heartbeats_notify AFTER UPDATE ON worker_heartbeats
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION qtg_notify_on_heartbeat_change();

-- ------------------------------------------------------- capital transfers

-- A treasury-level request: move `amount` of `asset` from `source` to
-- `destination` through a route template. Its movement still needs its own
-- four-eyes approval; the transfer follows it.
CREATE TABLE capital_transfer_requests (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    network_class       text NOT NULL,
    asset               text NOT NULL CHECK (length(asset) BETWEEN 1 AND 64),
    amount              text NOT NULL CHECK (amount ~ '^[0-9]{1,30}(\.[0-9]{1,18})?$'),
    source              text NOT NULL CHECK (length(source) BETWEEN 1 AND 512),
    destination         text NOT NULL CHECK (length(destination) BETWEEN 1 AND 512),
    template_key        text NOT NULL,
    note                text,
    status              text NOT NULL DEFAULT 'pending' CHECK (status IN (
        'pending', 'movement_created', 'completed', 'failed', 'needs_attention')),
    request_id          uuid UNIQUE REFERENCES movement_requests (id),
    idempotency_key     text NOT NULL,
    request_fingerprint text NOT NULL,
    created_by          text NOT NULL,
    last_error          text,
    followed_up_at      timestamptz,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- an idempotency key belongs to the principal that used it
    UNIQUE (created_by, idempotency_key),
    CHECK (status = 'pending' OR status = 'needs_attention' OR request_id IS NOT NULL)
);
CREATE INDEX capital_transfer_requests_open
    ON capital_transfer_requests (created_at)
    WHERE status IN ('pending', 'movement_created', 'needs_attention');
CREATE INDEX capital_transfer_requests_created ON capital_transfer_requests (created_at, id);
CREATE TRIGGER capital_transfer_requests_touch BEFORE UPDATE ON capital_transfer_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_touch_updated_at();

-- The one mapping from a movement's state to its transfer's status, used by
-- the trigger below and by capital_transfer_followup's reconciliation.
CREATE FUNCTION qtg_capital_transfer_status(p_request_state text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_request_state = 'COMPLETED' THEN 'completed'
        WHEN p_request_state IN ('FAILED', 'REJECTED', 'EXPIRED', 'CANCELLED') THEN 'failed'
        WHEN p_request_state = 'MANUAL_INTERVENTION' THEN 'needs_attention'
        ELSE 'movement_created'
    END
$$;

-- The transfer follows its movement in the movement's own transaction, so
-- GET /v3/capital-transfers is never behind; leaving PENDING_APPROVAL
-- resolves a "stale transfer" notification.
CREATE FUNCTION qtg_capital_transfer_follow_movement() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    UPDATE capital_transfer_requests
    SET status = qtg_capital_transfer_status(NEW.request_state)
    WHERE request_id = NEW.id
      AND status IS DISTINCT FROM qtg_capital_transfer_status(NEW.request_state)
    RETURNING id INTO v_id;
    IF OLD.request_state = 'PENDING_APPROVAL' THEN
        SELECT id INTO v_id FROM capital_transfer_requests WHERE request_id = NEW.id;
        IF v_id IS NOT NULL THEN
            PERFORM qtg_resolve_notification('capital_transfer_stale:' || v_id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER movement_requests_capital_transfer AFTER UPDATE ON movement_requests
    FOR EACH ROW
    WHEN (NEW.request_state IS DISTINCT FROM OLD.request_state)
    EXECUTE FUNCTION qtg_capital_transfer_follow_movement();
