-- When a request entered its current state (issue 25 item 1): an undecided node
-- pages once per node attempt *per EXECUTING episode*. The sweep used to page a node
-- attempt once for ever, so a node left undecided after an operator resumed the
-- movement, or a second undecided node whose sibling an operator resolved, went
-- back to waiting silently. Now a node whose page predates the request's return to
-- EXECUTING pages again once the request has been EXECUTING for the attention bound.
--
-- Rows from before this migration have NULL; readers take coalesce(state_entered_at,
-- updated_at). The trigger mirrors 0016's for nodes: it runs only on writes that
-- change request_state.
ALTER TABLE movement_requests ADD COLUMN state_entered_at timestamptz;
ALTER TABLE movement_requests ALTER COLUMN state_entered_at SET DEFAULT now();

-- 0016's function only stamps NEW.state_entered_at: it serves this table as well.
CREATE TRIGGER movement_requests_state_entered
    BEFORE UPDATE OF request_state ON movement_requests
    FOR EACH ROW
    WHEN (OLD.request_state IS DISTINCT FROM NEW.request_state)
    EXECUTE FUNCTION qtg_node_state_entered();

-- The page names the nodes that need a person: a submit that never returned (SUBMITTING
-- past its grace, paged by the same sweep) was left out of the node list, so its page
-- said "Nodes:" of nothing. 0011's function with SUBMITTING added to the list.
CREATE OR REPLACE FUNCTION qtg_notify_on_movement_event() RETURNS trigger
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
    WHERE n.request_id = NEW.request_id
      AND n.node_state IN ('FAILED', 'UNKNOWN', 'SUBMITTING');
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

-- The attention sweep's walk (sql/node_attention/raise_attention.sql): undecided
-- nodes in the order they became undecided.
CREATE INDEX movement_request_nodes_undecided
    ON movement_request_nodes ((coalesce(state_entered_at, updated_at)))
    WHERE node_state IN ('UNKNOWN', 'SUBMITTING');
