-- Security (issue 17 items 6, 7): idempotency keys per principal, callback
-- signatures stored once.

-- ------------------------------------------------ 7. idempotency per principal
-- A key names a movement *of its creator*: another principal replaying alice's
-- key and body creates (or finds) its own movement, never hers.
ALTER TABLE movement_requests DROP CONSTRAINT movement_requests_idempotency_key_key;
ALTER TABLE movement_requests
    ADD CONSTRAINT movement_requests_created_by_idempotency_key_key
    UNIQUE (created_by, idempotency_key);

-- ------------------------------------------------ 6. callbacks signed once
-- The v3 signature of a row, computed with the secret current at its first
-- attempt and stored before that attempt is sent: every retry sends these
-- bytes again, even after MG_CALLBACK_SIGNING_SECRET was rotated.
ALTER TABLE movement_callback_outbox ADD COLUMN callback_signature text;
