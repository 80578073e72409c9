-- Keep one chain transaction the ledger did not know (issue 43 item 2). Idempotent:
-- two runtimes that reconcile the same account at once find the same transactions; the
-- second one's rows (same nonce, hash or node) are left out.
INSERT INTO evm_ledger_adoptions
    (chain_id, address, nonce, tx_hash, block_number, disposition, request_node_id, evidence)
VALUES (%(chain_id)s, %(address)s, %(nonce)s, %(tx_hash)s, %(block_number)s,
        %(disposition)s, %(request_node_id)s, %(evidence)s)
ON CONFLICT DO NOTHING
RETURNING id
