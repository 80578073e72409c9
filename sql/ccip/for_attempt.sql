-- The intent of one ccip_send node attempt (recover, observe).
SELECT id, request_node_id, attempt_no, idempotency_key, lane, chain_id, sender, nonce, token, fee_token,
       tx_hash, block_number, message_id, dest_tx_hash, state, state_detail
FROM ccip_send_intents
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
