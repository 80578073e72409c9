-- One bounded batch of events of finished movements (`states`: COMPLETED, FAILED,
-- CANCELLED, REJECTED, EXPIRED; qtg/services/retention.py), in id order from after_id.
-- A movement's events go only when the movement has been finished for the whole
-- retention period and the event itself is that old; never an event of a live
-- movement, nor one a callback outbox row still points at. The delete is by
-- primary key, a batch at a time, so no lock is held for long.
--
-- Shaped so the walk is the only plan, whatever the statistics say: the primary
-- key from after_id, stopping at the LIMIT; each event's request by primary key
-- (a LATERAL sub-select, kept apart by OFFSET 0, its tests wrapped in IS TRUE so
-- no index on request_state offers to drive the join); the callback test through
-- movement_callback_outbox_event. On statistics of empty tables it otherwise
-- bitmap-scanned every finished request and joined their events by request_id.
WITH doomed AS (
    SELECT e.id
    FROM movement_events e
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = e.request_id
          AND (r.request_state = ANY(%(states)s::text[])) IS TRUE
          AND (coalesce(r.state_entered_at, r.updated_at)
               < now() - make_interval(secs => %(older_than_seconds)s)) IS TRUE
        OFFSET 0
    ) finished
    WHERE e.id > %(after_id)s AND e.id < %(bound_id)s
      AND (e.created_at < now() - make_interval(secs => %(older_than_seconds)s)) IS TRUE
      AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox c WHERE c.event_id = e.id)
    ORDER BY e.id
    LIMIT %(batch_size)s
    FOR UPDATE OF e SKIP LOCKED
), deleted AS (
    DELETE FROM movement_events e USING doomed WHERE e.id = doomed.id RETURNING e.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id FROM deleted
