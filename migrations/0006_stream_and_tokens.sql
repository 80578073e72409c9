-- The event stream's commit-safe horizon, and API token names.
--
-- 1. An event-writing transaction is visible as such while it runs.
--    qtg/api/feed.py delivers movement_events in id order and must know that
--    no event below its horizon can still appear (ids are taken at INSERT,
--    transactions commit in another order). Every event id now comes from
--    qtg_next_event_id(), which first takes a shared transaction-level
--    advisory lock (7435367, 1) — 7435367 is 'qtg' in ASCII — and only then
--    calls nextval. The lock is held until the transaction's outcome is
--    visible, so "the transactions holding (7435367, 1)" (pg_locks, per
--    database) is exactly the set that may still hold an unsettled event id.
--    Shared locks never wait for each other: writers do not serialise.
CREATE FUNCTION qtg_next_event_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7435367, 1);
    RETURN nextval('movement_events_id_seq'::regclass);
END;
$$;
ALTER TABLE movement_events ALTER COLUMN id SET DEFAULT qtg_next_event_id();

-- 2. A principal is a token name: at most one live token per name, so that
--    "alice" means one role, and rotation is revoke + create.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
