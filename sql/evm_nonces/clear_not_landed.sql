-- A judgement contradicted an earlier "not landed" finding (our receipt, or the nonce free).
UPDATE evm_nonce_reservations SET not_landed_seen_at = NULL
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND not_landed_seen_at IS NOT NULL
