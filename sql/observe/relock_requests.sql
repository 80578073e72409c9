-- Issue 25 item 5, the short second transaction: lock the observed nodes'
-- requests again, in id order (two observers re-locking overlapping requests
-- take them in the same order), waiting for a holder rather than skipping it:
-- every holder of a request (the dispatcher's settle, an API operation,
-- another observer's re-lock) holds it for a few statements only. Only
-- requests still EXECUTING: a request that left it since the claim is not the
-- observer's to move on (the claim requires EXECUTING too). The columns are
-- the claims' (progress.snapshots_from_claim), read under the lock.
--
-- One primary-key probe per id is the only plan (issue 29): the ids are made
-- distinct and sorted first, and each request is a LATERAL sub-select (OFFSET
-- 0 keeps the planner from flattening it) whose state test is wrapped in IS
-- TRUE, so no index of movement_requests but its primary key can serve it.
-- Written as r.id = ANY(ids) AND r.request_state = 'EXECUTING', with
-- statistics from before a burst, the planner bitmap-scanned the state index
-- (every EXECUTING request) and filtered it by the ids: 1.8 ms for 64 ids on
-- 10k in flight, growing with the backlog. The lock is taken inside the
-- sub-select (FOR ... OF r applies there), in the order the sorted ids are
-- walked: id order, as before.
SELECT r.id AS request_id, r.request_state, r.compiled_plan_hash,
       r.intent, r.input_params,
       r.current_frontier, r.template_version_id,
       r.created_at AS request_created_at,
       movement_templates.template_key, template_versions.version AS template_version,
       template_versions.risk_controls
FROM (SELECT DISTINCT wanted.id
      FROM unnest(%(request_ids)s::uuid[]) AS wanted(id)
      ORDER BY wanted.id) AS wanted
CROSS JOIN LATERAL (
    SELECT r.id, r.request_state, r.compiled_plan_hash, r.intent, r.input_params,
           r.current_frontier, r.template_version_id, r.template_id, r.created_at
    FROM movement_requests r
    WHERE r.id = wanted.id
      AND (r.request_state = 'EXECUTING') IS TRUE
    OFFSET 0
) r
JOIN movement_templates ON movement_templates.id = r.template_id
JOIN template_versions ON template_versions.id = r.template_version_id
ORDER BY r.id
FOR NO KEY UPDATE OF r
