-- Whether a FAILED node's failure is proven (migrations/0050_failure_proof.sql): retry
-- makes a new attempt, which is safe only when the last one can no longer move money.
SELECT qtg_failure_proven(n.id, n.attempt_no, n.error_code) AS proven
FROM movement_request_nodes n
WHERE n.id = %(node_id)s
