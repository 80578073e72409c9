-- The row the next promoted row chains to (none: the chain is empty), with its
-- version: a keyed promoter refuses to extend a head that is not keyed (issue 26).
SELECT id, row_hash, chain_version
FROM audit_events
ORDER BY id DESC
LIMIT 1
