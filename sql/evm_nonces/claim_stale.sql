-- evm_nonce_reaper: open reservations untouched for the threshold, one runtime each.
SELECT id, chain_id, address, nonce, state, tx_hash, request_node_id, attention_raised,
       now() - updated_at > make_interval(secs => %(attention_seconds)s) AS past_attention
FROM evm_nonce_reservations
WHERE state IN ('reserved', 'broadcast')
  AND updated_at < now() - make_interval(secs => %(stale_seconds)s)
ORDER BY updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
