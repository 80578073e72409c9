-- qtg-bench: the waiting movements still to approve, oldest first.
SELECT /* qtg-bench */ r.id
FROM movement_requests r
JOIN movement_templates t ON t.id = r.template_id
WHERE t.template_key = 'bench.one_observation_pending'
  AND r.request_state = 'PENDING_APPROVAL'
ORDER BY r.created_at, r.id
