SELECT id, request_fingerprint
FROM movement_requests
WHERE idempotency_key = %(idempotency_key)s
