-- Newest first; the cursor is the (created_at, id) of the last row of the previous page.
SELECT r.id, r.network_class, r.request_state, r.current_frontier, r.intent, r.callback_url,
       r.created_by, r.approved_by, r.expires_at, r.created_at, r.updated_at,
       t.template_key, v.version AS template_version
FROM movement_requests r
JOIN movement_templates t ON t.id = r.template_id
JOIN template_versions v ON v.id = r.template_version_id
WHERE (%(state)s::text IS NULL OR r.request_state = %(state)s)
  AND (%(template_key)s::text IS NULL OR t.template_key = %(template_key)s)
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s
