-- Issue 17 item 4: the keyed audit chain (qtg/domain/audit_chain.py).
-- Existing rows are chain_version 1 (legacy unkeyed sha256) and keep verifying;
-- rows promoted from now on carry chain_version 2 and the key_id of the
-- HMAC-SHA256 key they were chained with (or stay version 1 when the runtime
-- runs without a key, with a warning). ADD COLUMN with a constant default does
-- not rewrite the table, so the append-only trigger is not involved.
ALTER TABLE audit_events
    ADD COLUMN chain_version smallint NOT NULL DEFAULT 1
        CHECK (chain_version IN (1, 2)),
    ADD COLUMN key_id text,
    ADD CONSTRAINT audit_events_key_id_when_keyed
        CHECK ((chain_version = 2) = (key_id IS NOT NULL));
