-- Intents of one movement (tests, operators).
SELECT i.* FROM ccip_send_intents i
JOIN movement_request_nodes n ON n.id = i.request_node_id
WHERE n.request_id = %(request_id)s
ORDER BY i.id
