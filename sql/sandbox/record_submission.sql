-- The side effect, at most once per idempotency key. A repeated key changes
-- nothing but the duplicate counter and returns the original row; concurrent
-- callers with one key serialise on the primary key, so exactly one inserts.
INSERT INTO sandbox_submissions AS s (
    idempotency_key, request_id, request_node_id, attempt_no, action_type,
    payload_hash, signature, provider_refs, artifacts
) VALUES (
    %(idempotency_key)s, %(request_id)s, %(request_node_id)s, %(attempt_no)s, %(action_type)s,
    %(payload_hash)s, %(signature)s, %(provider_refs)s, %(artifacts)s
)
ON CONFLICT (idempotency_key) DO UPDATE
    SET duplicate_submits = s.duplicate_submits + 1,
        updated_at = now()
RETURNING s.*, (s.xmax = 0) AS inserted
