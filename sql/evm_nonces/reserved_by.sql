-- The node that reserved each of some nonces (issue 43 item 2): when the ledger kept a
-- reservation but lost its signed bytes, the transaction at that nonce is first matched
-- to that node. An allowance raise's key is `<node id>:approve…`: its node is the part
-- before the first colon.
SELECT nonce, split_part(request_node_id, ':', 1) AS request_node_id
FROM evm_nonce_reservations
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = ANY(%(nonces)s::bigint[])
  AND request_node_id IS NOT NULL
