-- Write-ahead of a broadcast (issue 24): the signed bytes, kept for every attempt and
-- replacement of a nonce, before they leave this process. The same bytes twice are one row.
INSERT INTO evm_signed_transactions (chain_id, address, nonce, kind, request_node_id, attempt_no,
                                     tx_hash, raw, payload, max_fee_per_gas,
                                     max_priority_fee_per_gas)
VALUES (%(chain_id)s, %(address)s, %(nonce)s, %(kind)s, %(request_node_id)s, %(attempt_no)s,
        %(tx_hash)s, %(raw)s, %(payload)s, %(max_fee)s, %(tip)s)
ON CONFLICT (tx_hash) DO NOTHING
