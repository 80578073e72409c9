-- Idempotency keys are scoped per principal: only the caller's own movement
-- under this key counts (another principal's is invisible here).
SELECT id, request_fingerprint
FROM movement_requests
WHERE created_by = %(created_by)s
  AND idempotency_key = %(idempotency_key)s
