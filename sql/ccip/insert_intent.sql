-- Write-ahead of ccipSend: the intent, committed before the broadcast. A second
-- call for the same attempt (same idempotency key) returns the row already there.
WITH ins AS (
    INSERT INTO ccip_send_intents (
        request_node_id, attempt_no, idempotency_key, lane, chain_id, source_selector,
        dest_selector, router, sender, receiver, token, amount, fee_token, fee, nonce, tx_hash)
    VALUES (
        %(request_node_id)s, %(attempt_no)s, %(idempotency_key)s, %(lane)s, %(chain_id)s,
        %(source_selector)s, %(dest_selector)s, %(router)s, %(sender)s, %(receiver)s,
        %(token)s, %(amount)s, %(fee_token)s, %(fee)s, %(nonce)s, %(tx_hash)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, tx_hash
)
SELECT id, tx_hash FROM ins
UNION ALL
SELECT id, tx_hash FROM ccip_send_intents WHERE idempotency_key = %(idempotency_key)s
LIMIT 1
