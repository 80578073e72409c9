-- One page of the rows being archived, in chain order, with everything needed to
-- re-check their hashes offline.
SELECT id, outbox_id, actor, action, object_type, object_id, detail, occurred_at,
       promoted_at, prev_hash, row_hash, chain_version, key_id
FROM audit_events
WHERE id > %(after_id)s AND id <= %(up_to_id)s
ORDER BY id
LIMIT %(limit)s
