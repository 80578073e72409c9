-- Issue 15: the batch claims (sql/dispatch/claim_batch.sql,
-- sql/observe/claim_batch.sql) as index walks that stop after LIMIT locked
-- rows, instead of scanning and sorting every candidate.
--
-- Both claims order FIFO by the request's created_at, which lives on
-- movement_requests; an index can only walk in that order if the node row
-- carries it. request_created_at is a COPY of movement_requests.created_at,
-- which is immutable (set once at insert, never updated by any path), and a
-- node never changes request: so the copy can never go stale. The trigger
-- below writes it on every insert, from the request itself (whatever the
-- insert supplied), so every insert path — sql/movements/insert_nodes.sql,
-- tests/schema_rows.py, a hand-written INSERT — stays correct unchanged.
ALTER TABLE movement_request_nodes ADD COLUMN request_created_at timestamptz;

-- The backfill must not look like a change of each node: the guard trigger
-- would stamp every row's updated_at (recovery's grace cutoff and "idle
-- longest first" read it, and coalesce(state_entered_at, updated_at) is the
-- time-in-state), and the after trigger would run per row for nothing (no
-- state changes). ALTER TABLE above already holds the table exclusively.
ALTER TABLE movement_request_nodes DISABLE TRIGGER movement_request_nodes_guard;
ALTER TABLE movement_request_nodes DISABLE TRIGGER movement_request_nodes_after;
UPDATE movement_request_nodes n
SET request_created_at = r.created_at
FROM movement_requests r
WHERE r.id = n.request_id;
ALTER TABLE movement_request_nodes ENABLE TRIGGER movement_request_nodes_guard;
ALTER TABLE movement_request_nodes ENABLE TRIGGER movement_request_nodes_after;

ALTER TABLE movement_request_nodes ALTER COLUMN request_created_at SET NOT NULL;

CREATE FUNCTION qtg_node_request_created_at() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    created timestamptz;
BEGIN
    SELECT r.created_at INTO created FROM movement_requests r WHERE r.id = NEW.request_id;
    -- no such request: the row keeps what it has, and the foreign key (or,
    -- when that is NULL, the NOT NULL constraint) rejects it
    IF FOUND THEN
        NEW.request_created_at := created;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER movement_request_nodes_request_created_at
    BEFORE INSERT ON movement_request_nodes
    FOR EACH ROW EXECUTE FUNCTION qtg_node_request_created_at();

-- The dispatch claim's walk: READY, non-manual nodes, oldest request first.
CREATE INDEX movement_request_nodes_ready_fifo
    ON movement_request_nodes (request_created_at, id)
    WHERE node_state = 'READY' AND node_kind <> 'manual';

-- The observe claim's walk: SUBMITTED/OBSERVING nodes, oldest request first.
-- The due test is a key column, written as the query writes it
-- (coalesce(next_observe_at, '-infinity') <= now()), so it is checked on the
-- index entry: a node that is not due costs no heap visit.
CREATE INDEX movement_request_nodes_observable_fifo
    ON movement_request_nodes
       (request_created_at, (coalesce(next_observe_at, '-infinity'::timestamptz)), id)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING');

-- movement_request_nodes_ready and movement_request_nodes_observable stay:
-- sql/dispatch/list_candidates.sql, sql/observe/next_due.sql and the
-- per-request reads still use them.
