-- Issue 25 item 5: the observer holds no lock across a provider call.
--
-- A pass claims its due nodes (FOR NO KEY UPDATE ... SKIP LOCKED), stamps each
-- with the claim's token in observe_lease and moves next_observe_at past the
-- observation (MG_NODE_OBSERVE_LEASE_SECONDS), and commits: the rows are
-- unlocked while the provider is asked, and no other observer claims them,
-- since they are not due. The outcome is written in a short second
-- transaction that locks the request and the node again and writes only when
-- observe_lease still holds the claim's token (and the node is still in the
-- same attempt and still SUBMITTED/OBSERVING): an observer whose lease ran out
-- and was taken by another claim discards what it saw.
--
-- A "still pending" outcome clears the token (see the trigger below); other
-- outcomes leave it, since only a match with the LATEST claim matters and the
-- next claim replaces it. NULL: not leased (never claimed since this
-- migration, or its last observation was pending). Nullable, no default:
-- adding it rewrites no row.
ALTER TABLE movement_request_nodes ADD COLUMN observe_lease uuid;

-- The lease holder's own "still pending" outcome (sql/observe/record_pending.sql
-- clears the lease) moves next_observe_at from the lease's end back to the
-- next poll: earlier, which would NOTIFY qtg_observe and wake every observer
-- of every process for a node due seconds from now, once per observation.
-- Nobody needs that wake: the pass that wrote it goes round again (a pass
-- that observed something drains) and then sleeps until its next_due, which
-- sees the new time. Every other move earlier (cex_transfer_ingest's wake_node,
-- an operator's re-arm) still notifies. The rest of the function is
-- migrations/0002_triggers.sql's, unchanged.
CREATE OR REPLACE FUNCTION qtg_after_node_change() RETURNS trigger
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
            OR ((NEW.next_observe_at < OLD.next_observe_at
                 OR (NEW.next_observe_at IS NULL AND OLD.next_observe_at IS NOT NULL))
                AND NOT (OLD.observe_lease IS NOT NULL AND NEW.observe_lease IS NULL))) THEN
        PERFORM qtg_notify('qtg_observe');
    ELSIF NEW.node_state = 'UNKNOWN'
       AND (TG_OP = 'INSERT' OR OLD.node_state <> 'UNKNOWN') THEN
        PERFORM qtg_notify('qtg_recover');
    END IF;
    RETURN NULL;
END;
$$;
