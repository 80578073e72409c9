-- A movement as a policy looks at it: the request, its template, its action
-- types and the venues its action nodes name (sources, with intent.source).
SELECT r.id, r.network_class, r.intent, r.input_params, r.created_by, r.request_state,
       r.policy_version, r.policy_rule, r.policy_approvals, r.policy_delay_seconds,
       t.template_key,
       ARRAY(SELECT DISTINCT n.action_type FROM movement_request_nodes n
             WHERE n.request_id = r.id AND n.node_kind = 'action') AS action_types,
       ARRAY(SELECT DISTINCT p.config ->> 'venue' FROM movement_request_nodes n
             JOIN plan_nodes p ON p.id = n.plan_node_id
             WHERE n.request_id = r.id AND n.node_kind = 'action'
               AND jsonb_typeof(p.config -> 'venue') = 'string') AS venues
FROM movement_requests r
JOIN movement_templates t ON t.id = r.template_id
WHERE r.id = %(request_id)s
