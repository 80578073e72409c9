-- ccip_stranded_reaper: unresolved intents older than the threshold, one runtime each.
-- The node is locked too (SKIP LOCKED): a node being submitted, observed or recovered
-- right now is that worker's, not the reaper's. Only intents of this runtime's
-- network class (issue 25): another class's intent is stranded and paged by its
-- own runtimes, which have the clients for its chains. The request is read, not
-- locked (network_class never changes).
SELECT i.id, i.request_node_id, i.attempt_no, i.chain_id, i.sender, i.nonce, i.tx_hash, i.state,
       i.lane, i.message_id, i.block_number, n.request_id, n.id AS node_id, n.node_key
FROM ccip_send_intents i
JOIN movement_request_nodes n ON n.id = i.request_node_id
JOIN movement_requests r ON r.id = n.request_id
WHERE i.state IN ('pending', 'broadcast', 'sent')
  AND i.updated_at < now() - make_interval(secs => %(threshold_seconds)s)
  AND r.network_class = %(network_class)s
  -- not leased to another reaper's lookups in flight (migrations/0059)
  AND (i.reap_until IS NULL OR i.reap_until <= now())
ORDER BY i.updated_at
LIMIT %(limit)s
FOR UPDATE OF i SKIP LOCKED
FOR NO KEY UPDATE OF n SKIP LOCKED
