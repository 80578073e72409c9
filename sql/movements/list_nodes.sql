SELECT n.id, n.node_key, n.node_kind, n.action_type, n.node_state, n.attempt_no,
       n.started_at, n.submitted_at, n.completed_at, n.next_observe_at, n.observe_count,
       n.provider_refs, n.artifacts, n.error_code, n.error_detail, n.updated_at
FROM movement_request_nodes n
JOIN plan_nodes p ON p.id = n.plan_node_id
WHERE n.request_id = %(request_id)s
ORDER BY p.position
