-- Stamp last_used_at, at most once a minute per token. SKIP LOCKED: when
-- another request of the same token is stamping it right now, this one does
-- not wait for it (one stamp is enough).
UPDATE api_tokens t
SET last_used_at = now()
FROM (
    SELECT id FROM api_tokens
    WHERE id = %(id)s
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
    FOR UPDATE SKIP LOCKED
) due
WHERE t.id = due.id
