-- A new live token. The unique index api_tokens_live_name refuses a second
-- live token with the same name (rotation is revoke, then create).
INSERT INTO api_tokens (name, token_hash, role)
VALUES (%(name)s, %(token_hash)s, %(role)s)
RETURNING id, name, role, created_at
