-- One observation of each submission named, by idempotency key (a batch at once:
-- qtg/providers/coalesce.py); a key with no submission returns no row.
UPDATE sandbox_submissions
SET observe_count = observe_count + 1,
    updated_at = now()
WHERE idempotency_key = ANY(%(idempotency_keys)s::text[])
RETURNING *
