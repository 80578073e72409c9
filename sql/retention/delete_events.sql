-- One bounded batch of events of finished movements (`states`: COMPLETED, FAILED,
-- CANCELLED, REJECTED, EXPIRED; qtg/services/retention.py), in id order from after_id.
-- A movement's events go only when the movement has been terminal for the whole
-- retention period and the event itself is that old; never an event of a live
-- movement, nor one a callback outbox row still points at. The delete is by
-- primary key, a batch at a time, so no lock is held for long.
WITH doomed AS (
    SELECT e.id
    FROM movement_events e
    WHERE e.id > %(after_id)s AND e.id < %(bound_id)s
      AND e.created_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND EXISTS (
          SELECT 1 FROM movement_requests r
          WHERE r.id = e.request_id
            AND r.request_state = ANY(%(states)s::text[])
            AND coalesce(r.state_entered_at, r.updated_at)
                < now() - make_interval(secs => %(older_than_seconds)s))
      AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox c WHERE c.event_id = e.id)
    ORDER BY e.id
    LIMIT %(batch_size)s
    FOR UPDATE OF e SKIP LOCKED
), deleted AS (
    DELETE FROM movement_events e USING doomed WHERE e.id = doomed.id RETURNING e.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id FROM deleted
