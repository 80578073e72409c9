-- The requests with their template and plan version: everything an
-- ExecutionContext needs besides the nodes. Several at once: a batch of claims
-- reads all its requests in one statement. The requests are the ones named in
-- qtg.claimed_requests (sql/progress/name_requests.sql says why no parameter).
--
-- One primary-key probe per id is the only plan (issue 29): the ids are made
-- distinct first and each request is a LATERAL sub-select (OFFSET 0 keeps the
-- planner from flattening it). Written as r.id = ANY(ids), with statistics
-- from before a burst, the planner seq-scanned movement_requests for a batch
-- of 64 ids (1.2 ms on 10k requests, growing with the table).
SELECT r.id, r.request_state, r.compiled_plan_hash, r.intent, r.input_params,
       r.current_frontier, r.template_version_id, r.created_at, r.policy_version,
       t.template_key, v.version AS template_version, v.risk_controls
FROM (SELECT DISTINCT wanted.id
      FROM unnest(nullif(current_setting('qtg.claimed_requests', true), '')::uuid[])
           AS wanted(id)) AS wanted
CROSS JOIN LATERAL (
    SELECT r.*
    FROM movement_requests r
    WHERE r.id = wanted.id
    OFFSET 0
) r
JOIN movement_templates t ON t.id = r.template_id
JOIN template_versions v ON v.id = r.template_version_id
