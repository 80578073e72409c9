-- Newest first; keyset pagination on id. open: true = unresolved only, false = resolved only.
SELECT id, kind, severity, subject, body, links, request_id, node_key, dedupe_key,
       occurrences, last_raised_at, routed_at, resolved_at, created_at
FROM notifications
WHERE (%(open)s::boolean IS NULL OR (resolved_at IS NULL) = %(open)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
ORDER BY id DESC
LIMIT %(limit)s
