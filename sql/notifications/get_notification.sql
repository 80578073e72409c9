SELECT id, kind, severity, subject, body, links, request_id, node_key, dedupe_key,
       occurrences, last_raised_at, routed_at, resolved_at, created_at
FROM notifications
WHERE id = %(id)s
