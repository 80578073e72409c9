-- Events in (after, upto], in id order, optionally for one request and some types.
SELECT id, request_id, node_key, event_type, from_state, to_state, payload, created_at
FROM movement_events
WHERE id > %(after)s AND id <= %(upto)s
  AND (%(request_id)s::uuid IS NULL OR request_id = %(request_id)s::uuid)
  AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s::text[]))
ORDER BY id
LIMIT %(limit)s
