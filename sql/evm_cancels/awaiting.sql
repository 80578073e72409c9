-- Confirmed FAILED resolutions waiting for the chain's proof (issue 43 item 3), of this
-- runtime's network class, oldest first, with how long they have waited, and the node's
-- action type (a provider-proven node's provider decides it, issue 46).
SELECT res.id, res.request_id, res.node_id, res.node_key, res.attempt_no,
       extract(epoch FROM now() - res.decided_at)::float8 AS waiting_seconds,
       n.action_type
FROM movement_node_resolutions res
JOIN movement_requests r ON r.id = res.request_id
JOIN movement_request_nodes n ON n.id = res.node_id
WHERE res.status = 'confirmed' AND res.applied_at IS NULL
  AND r.network_class = %(network_class)s
ORDER BY res.id
LIMIT %(limit)s
