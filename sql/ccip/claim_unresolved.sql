-- ccip_stranded_reaper: unresolved intents older than the threshold, one runtime each.
-- The node is locked too (SKIP LOCKED): a node being submitted, observed or recovered
-- right now is that worker's, not the reaper's.
SELECT i.id, i.chain_id, i.sender, i.nonce, i.tx_hash, i.state, i.lane, i.message_id,
       i.block_number, n.request_id, n.id AS node_id, n.node_key
FROM ccip_send_intents i
JOIN movement_request_nodes n ON n.id = i.request_node_id
WHERE i.state IN ('pending', 'broadcast', 'sent')
  AND i.updated_at < now() - make_interval(secs => %(threshold_seconds)s)
ORDER BY i.updated_at
LIMIT %(limit)s
FOR UPDATE OF i SKIP LOCKED
FOR NO KEY UPDATE OF n SKIP LOCKED
