-- Issue 29: the AFTER ROW triggers of movement_request_nodes and
-- movement_requests run only for a row they have something to do for.
--
-- Without a WHEN clause PostgreSQL queues every updated row for the trigger,
-- fetches its old and new versions again at the end of the statement and
-- calls the PL/pgSQL function, which then decides there is nothing to do.
-- That is the fate of both writes of every observation of waiting work: the
-- lease (sql/observe/take_lease.sql: next_observe_at moves later) and "still
-- pending, next at T" (sql/observe/record_pending_batch.sql: the lease holder
-- clears its lease; migrations/0022_observe_lease.sql says why that wakes
-- nobody). A WHEN clause is tested as the row is written, and a row that fails
-- it is never queued.
--
-- The clauses are the functions' own tests, unchanged (migrations/0022 for the
-- node, 0028 for the request), so the functions themselves stay as they are:
-- - a node: an event and a wake on a change of state; otherwise only
--   qtg_observe, for an observable node pulled earlier by anyone but its lease
--   holder's "still pending". A node is always inserted BLOCKED
--   (qtg_guard_node_state), for which the function does nothing: no INSERT
--   trigger.
-- - a request: its request_created event on INSERT; on UPDATE, an event or a
--   wake only on a change of its state, its frontier or its expires_at.
DROP TRIGGER movement_request_nodes_after ON movement_request_nodes;
CREATE TRIGGER movement_request_nodes_after
    AFTER UPDATE ON movement_request_nodes
    FOR EACH ROW
    WHEN (NEW.node_state IS DISTINCT FROM OLD.node_state
          OR (NEW.node_state IN ('SUBMITTED', 'OBSERVING')
              AND (NEW.next_observe_at < OLD.next_observe_at
                   OR (NEW.next_observe_at IS NULL AND OLD.next_observe_at IS NOT NULL))
              AND NOT (OLD.observe_lease IS NOT NULL AND NEW.observe_lease IS NULL)))
    EXECUTE FUNCTION qtg_after_node_change();

DROP TRIGGER movement_requests_after ON movement_requests;
CREATE TRIGGER movement_requests_inserted
    AFTER INSERT ON movement_requests
    FOR EACH ROW EXECUTE FUNCTION qtg_after_request_change();
CREATE TRIGGER movement_requests_after
    AFTER UPDATE ON movement_requests
    FOR EACH ROW
    WHEN (NEW.request_state IS DISTINCT FROM OLD.request_state
          OR NEW.current_frontier IS DISTINCT FROM OLD.current_frontier
          OR NEW.expires_at IS DISTINCT FROM OLD.expires_at)
    EXECUTE FUNCTION qtg_after_request_change();
