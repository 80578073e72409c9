-- A new transfer, pending until its movement exists. A concurrent create with
-- the same key loses here (no row returned) and reads the winner's.
INSERT INTO capital_transfer_requests
    (network_class, asset, amount, source, destination, template_key, note,
     idempotency_key, request_fingerprint, created_by)
VALUES (%(network_class)s, %(asset)s, %(amount)s, %(source)s, %(destination)s,
        %(template_key)s, %(note)s, %(idempotency_key)s, %(request_fingerprint)s,
        %(created_by)s)
ON CONFLICT (created_by, idempotency_key) DO NOTHING
RETURNING id
