-- evm_nonce_reaper: the chain's verdict on one claimed row.
UPDATE evm_nonce_reservations SET state = %(state)s, updated_at = now() WHERE id = %(id)s
