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

CREATE FUNCTION qtg_request_state_entered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.state_entered_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE TRIGGER movement_requests_state_entered
    BEFORE UPDATE OF request_state ON movement_requests
    FOR EACH ROW
    WHEN (OLD.request_state IS DISTINCT FROM NEW.request_state)
    EXECUTE FUNCTION qtg_request_state_entered();
