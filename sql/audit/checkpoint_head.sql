-- The chain's head and its row count, for a checkpoint (no rows: NULL head).
SELECT (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1) AS head_id,
       (SELECT row_hash FROM audit_events ORDER BY id DESC LIMIT 1) AS head_hash,
       (SELECT count(*) FROM audit_events) AS count
