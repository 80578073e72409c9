-- The chain transaction adopted as a node's payment (issue 43 item 2): the node is
-- observed from it and never signed again.
SELECT chain_id, address, nonce, tx_hash, block_number
FROM evm_ledger_adoptions
WHERE request_node_id = %(request_node_id)s AND disposition = 'adopted'
