-- The row the next promoted row chains to (none: the chain is empty), with its
-- version: a keyed promoter refuses to extend a head that is not keyed, an unkeyed
-- one a head that is (issue 26).
SELECT id, row_hash, chain_version, key_id
FROM audit_events
ORDER BY id DESC
LIMIT 1
