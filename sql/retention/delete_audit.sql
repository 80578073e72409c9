-- One bounded batch of archived audit rows (at or below the newest anchor). The
-- append-only trigger lets these deletes through only because the transaction set
-- qtg.audit_prune and an anchor covers them (migration 0024).
WITH doomed AS (
    SELECT id FROM audit_events
    WHERE id > %(after_id)s AND id <= %(up_to_id)s
    ORDER BY id
    LIMIT %(batch_size)s
), deleted AS (
    DELETE FROM audit_events a USING doomed WHERE a.id = doomed.id RETURNING a.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id FROM deleted
