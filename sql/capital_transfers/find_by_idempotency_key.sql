-- An idempotency key belongs to the principal that used it.
SELECT id, request_fingerprint
FROM capital_transfer_requests
WHERE created_by = %(created_by)s
  AND idempotency_key = %(idempotency_key)s
