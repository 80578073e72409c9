-- Look a live token up by its hash and stamp last_used_at, at most once a
-- minute per token, so that authentication does not write a row on every
-- request (and busy tokens do not contend on their row).
WITH hit AS (
    SELECT id, name, role, last_used_at
    FROM api_tokens
    WHERE token_hash = %(token_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE api_tokens t
    SET last_used_at = now()
    FROM hit
    WHERE t.id = hit.id
      AND (hit.last_used_at IS NULL OR hit.last_used_at < now() - interval '1 minute')
    RETURNING t.id
)
SELECT hit.id, hit.name, hit.role FROM hit
