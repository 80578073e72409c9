-- The event stream's commit-safe position, and API token names.
--
-- 1. An event's id is taken only after its transaction has an xid.
--    qtg/api/feed.py delivers movement_events in id order and proves that no
--    event below its horizon can still appear; the proof needs "a transaction
--    that holds event id g had its xid before g was taken". Column defaults are
--    evaluated in column order (id before xact_id), so without this a
--    transaction whose first write is an event would take its id first and its
--    xid a moment later. Every event today is written by a trigger after an
--    UPDATE/INSERT that already assigned the xid; this makes it true for any
--    writer.
CREATE FUNCTION qtg_next_event_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('movement_events_id_seq'::regclass);
END;
$$;
ALTER TABLE movement_events ALTER COLUMN id SET DEFAULT qtg_next_event_id();

-- 2. A principal is a token name: at most one live token per name, so that
--    "alice" means one role, and rotation is revoke + create.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
