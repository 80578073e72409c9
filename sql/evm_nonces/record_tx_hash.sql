-- Write-ahead: the signed transaction's hash, before it is broadcast.
UPDATE evm_nonce_reservations SET tx_hash = %(tx_hash)s, updated_at = now()
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND state = 'reserved'
