-- The row_hash the next promoted row chains to (none: the chain is empty).
SELECT row_hash
FROM audit_events
ORDER BY id DESC
LIMIT 1
