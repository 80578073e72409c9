-- Security (issue 17): idempotency keys per principal.

-- ------------------------------------------------ 7. idempotency per principal
-- A key names a movement *of its creator*: another principal replaying alice's
-- key and body creates (or finds) its own movement, never hers.
ALTER TABLE movement_requests DROP CONSTRAINT movement_requests_idempotency_key_key;
ALTER TABLE movement_requests
    ADD CONSTRAINT movement_requests_created_by_idempotency_key_key
    UNIQUE (created_by, idempotency_key);
