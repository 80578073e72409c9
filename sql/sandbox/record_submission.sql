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
    %(idempotency_keys)b::text[], %(request_ids)b::text[], %(request_node_ids)b::text[],
    %(attempt_nos)b::integer[], %(action_types)b::text[], %(payload_hashes)b::text[],
    %(signatures)b::text[], %(provider_refs)b::jsonb[], %(artifacts)b::jsonb[]
) AS submitted
ORDER BY 1
ON CONFLICT (idempotency_key) DO UPDATE
    SET duplicate_submits = s.duplicate_submits + 1,
        updated_at = now()
RETURNING s.*, (s.xmax = 0) AS inserted
