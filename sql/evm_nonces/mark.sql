-- Move a reservation forward (broadcast / consumed / released); never out of consumed.
UPDATE evm_nonce_reservations SET state = %(state)s, updated_at = now()
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND state <> 'consumed'
