-- The floor's table (bench/floor.py): one row per node, its READY commit's
-- transaction id kept for the pickup's start, one partial index for the claim
-- and a NOTIFY on insert; nothing else — no event log, no state guards.
CREATE TABLE floor_nodes (
    id              bigserial PRIMARY KEY,
    node_state      text NOT NULL DEFAULT 'READY',
    params          jsonb NOT NULL,
    ready_xid       xid NOT NULL DEFAULT (pg_current_xact_id()::text::xid),
    idempotency_key text,
    prepared_action jsonb
);
CREATE INDEX floor_nodes_ready ON floor_nodes (id) WHERE node_state = 'READY';
CREATE FUNCTION floor_nodes_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('floor_dispatch', '');
    RETURN NULL;
END $$;
CREATE TRIGGER floor_nodes_ready_notify AFTER INSERT ON floor_nodes
    FOR EACH ROW EXECUTE FUNCTION floor_nodes_notify();
