-- One page of the chain for verification, in chain (id) order.
SELECT id, outbox_id, actor, action, object_type, object_id, detail, occurred_at,
       prev_hash, row_hash, chain_version, key_id
FROM audit_events
WHERE id > %(after_id)s
ORDER BY id ASC
LIMIT %(limit)s
