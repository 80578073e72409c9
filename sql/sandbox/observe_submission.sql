UPDATE sandbox_submissions
SET observe_count = observe_count + 1,
    updated_at = now()
WHERE idempotency_key = %(idempotency_key)s
RETURNING *
