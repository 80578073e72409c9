-- A released nonce below live ones, taken for a zero-value self-transfer (the gap fill).
UPDATE evm_nonce_reservations
SET state = 'broadcast', request_node_id = 'gap_fill', attempt_no = NULL,
    tx_hash = %(tx_hash)s, attention_raised = false, not_landed_seen_at = NULL, updated_at = now()
WHERE id = %(id)s AND state = 'released'
RETURNING id
