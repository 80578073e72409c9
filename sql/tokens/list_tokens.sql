-- Never the hash: listing shows who can get in, not how.
SELECT id, name, role, created_at, revoked_at, last_used_at
FROM api_tokens
WHERE %(include_revoked)s OR revoked_at IS NULL
ORDER BY name, created_at
