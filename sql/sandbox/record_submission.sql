-- The side effects of a batch of submits (qtg/providers/coalesce.py), each at most
-- once per idempotency key. A repeated key changes nothing but the duplicate
-- counter and returns the original row; concurrent callers with one key serialise
-- on the primary key, so exactly one inserts. Sorted by key, so two batches lock
-- shared keys in one order.
INSERT INTO sandbox_submissions AS s (
    idempotency_key, request_id, request_node_id, attempt_no, action_type,
    payload_hash, signature, provider_refs, artifacts
)
SELECT * FROM unnest(
    %(idempotency_keys)s::text[], %(request_ids)s::text[], %(request_node_ids)s::text[],
    %(attempt_nos)s::integer[], %(action_types)s::text[], %(payload_hashes)s::text[],
    %(signatures)s::text[], %(provider_refs)s::jsonb[], %(artifacts)s::jsonb[]
) AS submitted
ORDER BY 1
ON CONFLICT (idempotency_key) DO UPDATE
    SET duplicate_submits = s.duplicate_submits + 1,
        updated_at = now()
RETURNING s.*, (s.xmax = 0) AS inserted
