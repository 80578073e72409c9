-- When a node entered its current state (issue 15/16: the pickup and
-- time-in-state histograms). updated_at moves on every write (an observation
-- that stays OBSERVING rewrites the row each time), so it cannot say how long
-- a node has been OBSERVING; this column moves only when node_state does.
--
-- Rows from before this migration have NULL (unknown); readers take
-- coalesce(state_entered_at, updated_at). New rows get their insert time.
-- A trigger of its own (not a change to the guard function of 0004), whose
-- WHEN clause is evaluated without calling PL/pgSQL: it runs only on the
-- few writes that change the state.
ALTER TABLE movement_request_nodes ADD COLUMN state_entered_at timestamptz;
ALTER TABLE movement_request_nodes ALTER COLUMN state_entered_at SET DEFAULT now();

CREATE FUNCTION qtg_node_state_entered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.state_entered_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE TRIGGER movement_request_nodes_state_entered
    BEFORE UPDATE OF node_state ON movement_request_nodes
    FOR EACH ROW
    WHEN (OLD.node_state IS DISTINCT FROM NEW.node_state)
    EXECUTE FUNCTION qtg_node_state_entered();
