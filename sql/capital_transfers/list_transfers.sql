-- Newest first; keyset pagination on (created_at, id).
SELECT t.*, r.request_state
FROM capital_transfer_requests t
LEFT JOIN movement_requests r ON r.id = t.request_id
WHERE (%(status)s::text IS NULL OR t.status = %(status)s)
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (t.created_at, t.id) < (%(after_created_at)s, %(after_id)s::uuid))
ORDER BY t.created_at DESC, t.id DESC
LIMIT %(limit)s
