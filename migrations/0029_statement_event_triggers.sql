-- Issue 29: the event log, its callbacks and the wake-ups are written once per
-- statement, not once per row.
--
-- Since an outcome's one-row writes go out as one UPDATE over arrays per kind
-- (qtg/db/deferred.py), one statement moves a whole batch of nodes or requests;
-- yet each row still called its own PL/pgSQL trigger, which wrote its own
-- movement_events row, whose own trigger looked up its request's callback_url
-- and called pg_notify. Measured on 200 nodes moved READY -> SUBMITTING by one
-- UPDATE (EXPLAIN ANALYZE, warm, this machine): 67 us per row with the row
-- triggers, 45 with these, 25 with no trigger at all. Same rows, same order,
-- same notifications:
--
-- * the AFTER UPDATE triggers of movement_request_nodes and movement_requests
--   are statement triggers over transition tables: one INSERT writes every
--   event of the statement, in the order the rows were updated (the order the
--   row triggers fired in: a transition table keeps it, row_number() over its
--   scan reads it), and each row's own events in the order the row trigger
--   wrote them; one pg_notify per channel that any row asked for;
-- * movement_events' AFTER INSERT is a statement trigger: one INSERT writes the
--   callbacks of every event whose request has a callback_url (the request
--   reached by primary key, one probe per event, whatever the statistics say),
--   in event id order, and one qtg_events wake-up — none for an INSERT that
--   wrote no row.
--
-- What the row triggers did on INSERT stays row-level where it did anything: a
-- new request writes request_created and may wake the expiry sweep; a new node
-- is always BLOCKED (qtg_guard_node_state), which neither writes an event nor
-- wakes anyone, so movement_request_nodes has no AFTER INSERT trigger now.
--
-- Statement triggers fire for an UPDATE that matched no row too: the functions
-- then find nothing to do in one scan of two empty tuplestores.

-- ----------------------------------------------------------------- nodes

CREATE FUNCTION qtg_after_nodes_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_changed  boolean;
    v_dispatch boolean;
    v_observe  boolean;
    v_recover  boolean;
BEGIN
    -- 0022's row rules, one row at a time, as aggregates over the statement
    SELECT coalesce(bool_or(n.node_state IS DISTINCT FROM o.node_state), false),
           coalesce(bool_or(n.node_state = 'READY' AND o.node_state <> 'READY'), false),
           coalesce(bool_or(
               n.node_state IN ('SUBMITTED', 'OBSERVING')
               AND (o.node_state NOT IN ('SUBMITTED', 'OBSERVING')
                    OR ((n.next_observe_at < o.next_observe_at
                         OR (n.next_observe_at IS NULL AND o.next_observe_at IS NOT NULL))
                        AND NOT (o.observe_lease IS NOT NULL AND n.observe_lease IS NULL)))),
               false),
           coalesce(bool_or(n.node_state = 'UNKNOWN' AND o.node_state <> 'UNKNOWN'), false)
    INTO v_changed, v_dispatch, v_observe, v_recover
    FROM new_nodes n JOIN old_nodes o ON o.id = n.id;

    IF v_changed THEN
        INSERT INTO movement_events
            (request_id, node_id, node_key, event_type, from_state, to_state, payload)
        SELECT n.request_id, n.id, n.node_key, 'node_state_changed', o.node_state, n.node_state,
               jsonb_strip_nulls(jsonb_build_object(
                   'action_type', n.action_type,
                   'attempt_no', n.attempt_no,
                   'error_code', n.error_code))
        FROM (SELECT t.*, row_number() OVER () AS updated_no FROM new_nodes t) n
        JOIN old_nodes o ON o.id = n.id
        WHERE n.node_state IS DISTINCT FROM o.node_state
        ORDER BY n.updated_no;
    END IF;
    IF v_dispatch THEN
        PERFORM qtg_notify('qtg_dispatch');
    END IF;
    IF v_observe THEN
        PERFORM qtg_notify('qtg_observe');
    END IF;
    IF v_recover THEN
        PERFORM qtg_notify('qtg_recover');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER movement_request_nodes_after ON movement_request_nodes;
CREATE TRIGGER movement_request_nodes_after_update
    AFTER UPDATE ON movement_request_nodes
    REFERENCING OLD TABLE AS old_nodes NEW TABLE AS new_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_after_nodes_update();
DROP FUNCTION qtg_after_node_change();

-- -------------------------------------------------------------- requests

-- 0002's INSERT branch, on its own. A request is always created
-- PENDING_APPROVAL (qtg_guard_request_state), so it never woke the dispatchers.
CREATE FUNCTION qtg_after_request_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_created', NULL, NEW.request_state,
        jsonb_build_object('template_version_id', NEW.template_version_id));
    IF NEW.request_state = 'PENDING_APPROVAL' AND NEW.expires_at IS NOT NULL THEN
        PERFORM qtg_notify('qtg_expire');
    END IF;
    RETURN NULL;
END;
$$;

-- 0028's UPDATE branch, over the statement: per row request_state_changed,
-- then request_attention (entering MANUAL_INTERVENTION), then
-- frontier_advanced, as the row trigger wrote them.
CREATE FUNCTION qtg_after_requests_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_changed  boolean;
    v_dispatch boolean;
    v_expire   boolean;
BEGIN
    SELECT coalesce(bool_or(n.request_state IS DISTINCT FROM o.request_state
                            OR n.current_frontier IS DISTINCT FROM o.current_frontier), false),
           coalesce(bool_or(n.request_state IN ('APPROVED', 'EXECUTING')
                            AND o.request_state IS DISTINCT FROM n.request_state
                            AND NOT (o.request_state = 'APPROVED'
                                     AND n.request_state = 'EXECUTING')), false),
           coalesce(bool_or(n.request_state = 'PENDING_APPROVAL' AND n.expires_at IS NOT NULL
                            AND o.expires_at IS DISTINCT FROM n.expires_at), false)
    INTO v_changed, v_dispatch, v_expire
    FROM new_requests n JOIN old_requests o ON o.id = n.id;

    IF v_changed THEN
        INSERT INTO movement_events (request_id, event_type, from_state, to_state, payload)
        SELECT n.id, ev.event_type, ev.from_state, ev.to_state, ev.payload
        FROM (SELECT t.*, row_number() OVER () AS updated_no FROM new_requests t) n
        JOIN old_requests o ON o.id = n.id
        CROSS JOIN LATERAL (VALUES
            (1, n.request_state IS DISTINCT FROM o.request_state,
             'request_state_changed', o.request_state, n.request_state, '{}'::jsonb),
            (2, n.request_state IS DISTINCT FROM o.request_state
                AND n.request_state = 'MANUAL_INTERVENTION',
             'request_attention', o.request_state, n.request_state,
             jsonb_build_object('reason', 'manual intervention required')),
            (3, n.current_frontier IS DISTINCT FROM o.current_frontier,
             'frontier_advanced', NULL, NULL,
             jsonb_build_object('frontier', to_jsonb(n.current_frontier)))
        ) AS ev (event_no, wanted, event_type, from_state, to_state, payload)
        WHERE ev.wanted
        ORDER BY n.updated_no, ev.event_no;
    END IF;
    IF v_dispatch THEN
        PERFORM qtg_notify('qtg_dispatch');
    END IF;
    IF v_expire THEN
        PERFORM qtg_notify('qtg_expire');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER movement_requests_after ON movement_requests;
CREATE TRIGGER movement_requests_after_insert
    AFTER INSERT ON movement_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_after_request_insert();
CREATE TRIGGER movement_requests_after_update
    AFTER UPDATE ON movement_requests
    REFERENCING OLD TABLE AS old_requests NEW TABLE AS new_requests
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_after_requests_update();
DROP FUNCTION qtg_after_request_change();

-- ---------------------------------------------------------------- events

-- 0005's callback fan-out and wake-up, over the statement. max_attempts comes
-- from the session setting qtg.callback_max_attempts, as before.
CREATE FUNCTION qtg_after_events_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO movement_callback_outbox
        (request_id, event_id, event_type, callback_url, payload, max_attempts)
    SELECT e.request_id, e.id, e.event_type, r.callback_url,
           jsonb_build_object(
               'event_id', e.id,
               'event_type', e.event_type,
               'request_id', e.request_id,
               'node_key', e.node_key,
               'from_state', e.from_state,
               'to_state', e.to_state,
               'data', e.payload,
               'occurred_at', e.created_at),
           coalesce(nullif(current_setting('qtg.callback_max_attempts', true), '')::integer, 5)
    FROM new_events e
    -- LIMIT 1 keeps the sub-select from being flattened into a join the
    -- planner could turn into a scan of movement_requests
    CROSS JOIN LATERAL (
        SELECT m.callback_url FROM movement_requests m WHERE m.id = e.request_id LIMIT 1
    ) r
    WHERE r.callback_url IS NOT NULL
    ORDER BY e.id;
    IF EXISTS (SELECT 1 FROM new_events) THEN
        PERFORM qtg_notify('qtg_events');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER movement_events_after ON movement_events;
CREATE TRIGGER movement_events_after_insert
    AFTER INSERT ON movement_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_after_events_insert();
DROP FUNCTION qtg_after_event_insert();
