-- Record the anchor, only if no other prune anchored meanwhile (the newest anchor
-- is still the one this run started from): two concurrent archives cannot both win.
INSERT INTO audit_archives (head_id, head_hash, count, head_chain_version, checkpoint,
                            archive_file, archive_sha256, rows_archived)
SELECT %(head_id)s, %(head_hash)s, %(count)s, %(head_chain_version)s, %(checkpoint)s,
       %(archive_file)s, %(archive_sha256)s, %(rows_archived)s
WHERE coalesce((SELECT max(head_id) FROM audit_archives), 0) = %(previous_head_id)s
RETURNING head_id
