-- Issue 25 item 5, the short second transaction: lock the observed nodes'
-- requests again, in id order (two observers re-locking overlapping requests
-- take them in the same order), waiting for a holder rather than skipping it:
-- every holder of a request (the dispatcher's settle, an API operation,
-- another observer's re-lock) holds it for a few statements only. Only
-- requests still EXECUTING: a request that left it since the claim is not the
-- observer's to move on (the claim requires EXECUTING too). The columns are
-- the claims' (progress.snapshots_from_claim), read under the lock.
SELECT r.id AS request_id, r.request_state, r.compiled_plan_hash,
       r.intent, r.input_params,
       r.current_frontier, r.template_version_id,
       r.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls
FROM movement_requests r
JOIN movement_templates ON movement_templates.id = r.template_id
JOIN template_versions ON template_versions.id = r.template_version_id
WHERE r.id = ANY(%(request_ids)s::uuid[])
  AND r.request_state = 'EXECUTING'
ORDER BY r.id
FOR NO KEY UPDATE OF r
