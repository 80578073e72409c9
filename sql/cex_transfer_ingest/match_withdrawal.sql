-- The cex_withdrawal node whose provider_refs name this withdrawal id (at this
-- venue, when the node's config names one).
SELECT n.id
FROM movement_request_nodes n
JOIN plan_nodes p ON p.id = n.plan_node_id
WHERE n.provider_refs ? 'withdrawal_id'
  AND n.provider_refs ->> 'withdrawal_id' = %(external_id)s
  AND n.action_type = 'cex_withdrawal'
  AND (p.config ->> 'venue' IS NULL OR p.config ->> 'venue' = %(venue)s)
ORDER BY n.updated_at DESC
LIMIT 1
