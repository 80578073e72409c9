-- qtg_events carries an empty payload, like every other channel.
--
-- With the event id as payload PostgreSQL could not fold the notifications of
-- one transaction (a node completion writes 3-5 events), and NOTIFY's cost is
-- paid at commit. The stream never read the payload: it reads movement_events
-- after its own cursor when woken (qtg/api/feed.py).

CREATE OR REPLACE FUNCTION qtg_after_event_insert() RETURNS trigger
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
    PERFORM qtg_notify('qtg_events');
    RETURN NULL;
END;
$$;
