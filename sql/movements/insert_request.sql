-- ON CONFLICT: a concurrent create by the same principal with the same
-- idempotency key wins; the loser reads the winner's row and compares
-- fingerprints. Keys are per principal (unique (created_by, idempotency_key)).
INSERT INTO movement_requests (
    network_class, template_id, template_version_id, compiled_plan_hash, intent, input_params,
    idempotency_key, request_fingerprint, callback_url, created_by, expires_at
)
VALUES (
    %(network_class)s, %(template_id)s, %(template_version_id)s, %(compiled_plan_hash)s,
    %(intent)s, %(input_params)s, %(idempotency_key)s, %(request_fingerprint)s,
    %(callback_url)s, %(created_by)s, now() + make_interval(secs => %(approval_ttl_seconds)s)
)
ON CONFLICT (created_by, idempotency_key) DO NOTHING
RETURNING id
