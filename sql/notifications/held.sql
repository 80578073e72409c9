-- Routed notifications waiting for a message on this route, oldest first.
SELECT n.id, n.kind, n.severity, n.subject, n.body, n.links, n.dedupe_key, n.occurrences,
       n.created_at, n.resolved_at
FROM notification_deliveries d
JOIN notifications n ON n.id = d.notification_id
WHERE d.route = %(route)s
  AND d.message_id IS NULL
ORDER BY d.notification_id
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
FOR UPDATE OF d SKIP LOCKED
