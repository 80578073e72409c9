-- A judgement found the nonce used by a transaction that is not ours: remember when first,
-- and say how long ago that was (a new attempt needs two findings this far apart).
UPDATE evm_nonce_reservations
SET not_landed_seen_at = coalesce(not_landed_seen_at, now())
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
RETURNING extract(epoch FROM now() - not_landed_seen_at)::float8 AS seen_for
