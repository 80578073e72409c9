-- Look a live token up by its hash. A plain read: authentication must not
-- write (or wait on a row lock) on every request. `stale` says last_used_at is
-- over a minute old, and the caller then stamps it with touch.sql.
SELECT id, name, role,
       (last_used_at IS NULL OR last_used_at < now() - interval '1 minute') AS stale
FROM api_tokens
WHERE token_hash = %(token_hash)s AND revoked_at IS NULL
