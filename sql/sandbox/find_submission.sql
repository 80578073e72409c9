SELECT * FROM sandbox_submissions WHERE idempotency_key = %(idempotency_key)s
