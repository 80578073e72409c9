-- The chain's head and its row count, for a checkpoint (no rows: NULL head). The
-- count is the chain's, archived rows included: the newest archive anchor's count
-- plus the rows after it (rows at or below it that a prune has not deleted yet
-- are already counted by the anchor).
WITH anchor AS (
    SELECT head_id, count FROM audit_archives ORDER BY head_id DESC LIMIT 1
)
SELECT (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1) AS head_id,
       (SELECT row_hash FROM audit_events ORDER BY id DESC LIMIT 1) AS head_hash,
       coalesce((SELECT count FROM anchor), 0)
       + (SELECT count(*) FROM audit_events
          WHERE id > coalesce((SELECT head_id FROM anchor), 0)) AS count
