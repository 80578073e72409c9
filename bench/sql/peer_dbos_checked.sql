-- What PostgreSQL holds of a DBOS run: workflows, and those SUCCESS with exactly one
-- checkpoint per step (their function ids distinct, as many as the workflow's steps).
SELECT count(*) AS workflows,
       count(*) FILTER (WHERE w.status = 'SUCCESS' AND steps.n = %(steps)s
                        AND steps.distinct_ids = %(steps)s) AS once
FROM dbos.workflow_status AS w
LEFT JOIN LATERAL (
    SELECT count(*) AS n, count(DISTINCT o.function_id) AS distinct_ids
    FROM dbos.operation_outputs AS o
    WHERE o.workflow_uuid = w.workflow_uuid
) AS steps ON true
WHERE w.queue_name IS NOT NULL AND w.name = 'noop_workflow'
