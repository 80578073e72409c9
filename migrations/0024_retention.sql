-- Retention (issue 29 item 4): `qtg prune` keeps movement_events, audit rows,
-- heartbeats and outboxes bounded for a runtime that runs for a year.
--
-- audit_events stays append-only, with one way out: rows at or below an archive
-- anchor may be deleted, and only by a transaction that says so
-- (SET LOCAL qtg.audit_prune = 'on'). An anchor is written only after the rows up
-- to it were exported to a file and that file verified (qtg/services/retention.py);
-- `qtg audit verify` then starts from the newest anchor: the first row after it
-- must chain to its head_hash. With a key configured the anchor carries a signed
-- checkpoint, so an attacker who deletes rows cannot write a matching anchor.
CREATE TABLE audit_archives (
    head_id            bigint PRIMARY KEY,
    head_hash          text NOT NULL,
    -- rows of the chain up to and including head_id, archived ones included
    count              bigint NOT NULL CHECK (count >= 1),
    head_chain_version smallint NOT NULL,
    -- {head_id, head_hash, count, key_id, created_at, mac}: signed when keyed
    checkpoint         jsonb NOT NULL,
    archive_file       text NOT NULL,
    archive_sha256     text NOT NULL,
    rows_archived      bigint NOT NULL CHECK (rows_archived >= 1),
    archived_at        timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION qtg_audit_archives_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_archives is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_archives_append_only
    BEFORE UPDATE OR DELETE ON audit_archives
    FOR EACH ROW EXECUTE FUNCTION qtg_audit_archives_append_only();
CREATE TRIGGER audit_archives_no_truncate
    BEFORE TRUNCATE ON audit_archives
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_audit_archives_append_only();

-- 0001's function, with the one DELETE it now lets through. UPDATE and TRUNCATE
-- are refused as before.
CREATE OR REPLACE FUNCTION qtg_audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND current_setting('qtg.audit_prune', true) = 'on'
       AND OLD.id <= (SELECT max(head_id) FROM audit_archives) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- Deleting a movement_events row checks this foreign key; without an index each
-- deleted event would scan the whole callback outbox.
CREATE INDEX movement_callback_outbox_event ON movement_callback_outbox (event_id)
    WHERE event_id IS NOT NULL;
