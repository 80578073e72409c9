SELECT * FROM sandbox_submissions ORDER BY created_at, idempotency_key
