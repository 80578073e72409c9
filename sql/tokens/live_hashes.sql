-- Every live token's hash, for the in-process gate that turns an unknown token
-- away without a query per request (qtg/services/tokens.py, TokenGate). The
-- table holds one row per principal: small, read whole, at most a few times a
-- second however many requests arrive.
SELECT token_hash
FROM api_tokens
WHERE revoked_at IS NULL
