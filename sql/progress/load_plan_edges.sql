-- The requests' plan edges as stored now (for plan-hash drift detection), of
-- the requests named in qtg.claimed_requests (sql/progress/name_requests.sql).
--
-- One primary-key probe per id is the only plan (issue 29), as in
-- sql/progress/load_request.sql: written as r.id = ANY(ids), with statistics
-- from before a burst, the planner seq-scanned movement_requests for a batch
-- of 64 ids.
SELECT r.id AS request_id, f.node_key AS from_key, t.node_key AS to_key
FROM (SELECT DISTINCT wanted.id
      FROM unnest(nullif(current_setting('qtg.claimed_requests', true), '')::uuid[])
           AS wanted(id)) AS wanted
CROSS JOIN LATERAL (
    SELECT r.id, r.template_version_id
    FROM movement_requests r
    WHERE r.id = wanted.id
    OFFSET 0
) r
JOIN plan_edges e ON e.template_version_id = r.template_version_id
JOIN plan_nodes f ON f.id = e.from_node_id
JOIN plan_nodes t ON t.id = e.to_node_id
