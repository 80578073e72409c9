-- Reuse the lowest released nonce the chain has not used yet (fills a gap first).
UPDATE evm_nonce_reservations r SET state = 'reserved', request_node_id = %(request_node_id)s,
       attempt_no = %(attempt_no)s, tx_hash = NULL, attention_raised = false, updated_at = now()
WHERE r.id = (SELECT id FROM evm_nonce_reservations
              WHERE chain_id = %(chain_id)s AND address = %(address)s AND state = 'released'
                AND nonce >= %(floor)s
              ORDER BY nonce LIMIT 1)
RETURNING r.nonce
