-- A judgement found the nonce consumed at the trusted depth with no receipt of ours
-- (issue 43: no evidence yet, never proof): remember when first, and say how long ago
-- (past MG_EVM_EVIDENCE_ATTENTION_SECONDS the wait pages).
UPDATE evm_nonce_reservations
SET not_landed_seen_at = coalesce(not_landed_seen_at, now())
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
RETURNING extract(epoch FROM now() - not_landed_seen_at)::float8 AS seen_for
