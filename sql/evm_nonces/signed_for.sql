-- Every transaction signed for one node attempt's nonce, oldest first, with its age.
SELECT tx_hash, raw, payload, kind, max_fee_per_gas, max_priority_fee_per_gas,
       extract(epoch FROM now() - created_at)::float8 AS age_seconds,
       extract(epoch FROM now() - last_broadcast_at)::float8 AS since_broadcast_seconds
FROM evm_signed_transactions
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
ORDER BY id
