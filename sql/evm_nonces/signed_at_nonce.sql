-- Every hash qtg signed for one nonce, whatever for (payments of any attempt, their
-- replacements, gap fills): a consuming transaction among them is qtg's own.
SELECT tx_hash, kind, request_node_id, attempt_no
FROM evm_signed_transactions
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
ORDER BY id
