-- One DBOS workflow's pickup: its enqueue's commit (the transaction whose id the enqueuer
-- read, sql peer_dbos_xid) → the commit of its first step's checkpoint (the step's
-- operation_outputs row, inserted once when the step completes), in ms.
SELECT 1000 * extract(epoch FROM pg_xact_commit_timestamp(step.xmin)
                                 - pg_xact_commit_timestamp(%(xid)s::xid)) AS ms
FROM dbos.operation_outputs AS step
WHERE step.workflow_uuid = %(workflow_id)s
ORDER BY step.function_id
LIMIT 1
