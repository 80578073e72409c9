-- Transfers whose movement is still awaiting approval past the threshold and
-- that have no open "stale" notification yet (one page per stale transfer),
-- of this runtime's network class only (issue 25).
SELECT t.id, t.asset, t.amount, t.source, t.destination, t.template_key, t.created_by,
       t.request_id, t.created_at, r.request_state
FROM capital_transfer_requests t
JOIN movement_requests r ON r.id = t.request_id
WHERE t.status = 'movement_created'
  AND t.network_class = %(network_class)s
  AND r.request_state = 'PENDING_APPROVAL'
  AND t.created_at < now() - make_interval(secs => %(stale_seconds)s)
  AND NOT EXISTS (
      SELECT 1 FROM notifications n
      WHERE n.dedupe_key = 'capital_transfer_stale:' || t.id
        AND n.resolved_at IS NULL)
ORDER BY t.created_at
LIMIT %(limit)s
FOR UPDATE OF t SKIP LOCKED
