-- The reservation a signed payment (or its replacement) belongs to, still this attempt's:
-- points its tx_hash at the newest signed bytes. No row: the nonce was taken back
-- (released and reused, or gap-filled) and these bytes must not be broadcast.
UPDATE evm_nonce_reservations SET tx_hash = %(tx_hash)s, updated_at = now()
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
  AND state IN ('reserved', 'broadcast')
RETURNING id
