-- The requests with their template and plan version: everything an
-- ExecutionContext needs besides the nodes. Several at once: a batch of claims
-- reads all its requests in one statement.
SELECT r.id, r.request_state, r.compiled_plan_hash, r.intent, r.input_params,
       r.current_frontier, r.template_version_id, r.created_at,
       t.template_key, v.version AS template_version, v.risk_controls
FROM movement_requests r
JOIN movement_templates t ON t.id = r.template_id
JOIN template_versions v ON v.id = r.template_version_id
WHERE r.id = ANY(%(request_ids)s::uuid[])
