-- Copy one outbox row into the append-only log with its chain hashes. The
-- jsonb detail is copied in SQL, byte for byte, rather than round-tripped
-- through Python. outbox_id is UNIQUE: a second promotion of the same row fails.
-- chain_version 2 rows carry the key_id of the HMAC key (migration 0014).
INSERT INTO audit_events (
    outbox_id, actor, action, object_type, object_id, detail, occurred_at, prev_hash, row_hash,
    chain_version, key_id
)
SELECT id, actor, action, object_type, object_id, detail, occurred_at,
       %(prev_hash)s, %(row_hash)s, %(chain_version)s, %(key_id)s
FROM audit_outbox
WHERE id = %(outbox_id)s
