-- failure_proven: the rule retry follows (migrations/0050_failure_proof.sql), for FAILED nodes.
SELECT n.id, n.node_key, n.node_kind, n.action_type, n.node_state, n.attempt_no,
       n.started_at, n.submitted_at, n.completed_at, n.next_observe_at, n.observe_count,
       n.provider_refs, n.artifacts, n.error_code, n.error_detail, n.updated_at,
       CASE WHEN n.node_state = 'FAILED'
            THEN qtg_failure_proven(n.id, n.attempt_no, n.error_code) END AS failure_proven
FROM movement_request_nodes n
JOIN plan_nodes p ON p.id = n.plan_node_id
WHERE n.request_id = %(request_id)s
ORDER BY p.position
