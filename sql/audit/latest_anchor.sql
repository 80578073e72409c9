-- The newest audit archive anchor (none: nothing was ever archived).
SELECT head_id, head_hash, count, head_chain_version, checkpoint, archive_file
FROM audit_archives
ORDER BY head_id DESC
LIMIT 1
