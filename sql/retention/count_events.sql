-- --dry-run: how many events delete_events.sql would remove (same predicates, no batches).
SELECT count(*) AS n
FROM movement_events e
WHERE e.id < %(bound_id)s
  AND e.created_at < now() - make_interval(secs => %(older_than_seconds)s)
  AND EXISTS (
      SELECT 1 FROM movement_requests r
      WHERE r.id = e.request_id
        AND r.request_state = ANY(%(states)s::text[])
        AND coalesce(r.state_entered_at, r.updated_at)
            < now() - make_interval(secs => %(older_than_seconds)s))
  AND NOT EXISTS (SELECT 1 FROM movement_callback_outbox c WHERE c.event_id = e.id)
