INSERT INTO plan_nodes (
    template_version_id, node_key, node_kind, action_type, executor_key, config, timeout_policy, position
)
SELECT %(template_version_id)s, n.key, n.kind, n.action_type, n.executor_key,
       n.config, n.timeout_policy, n.position
FROM jsonb_to_recordset(%(nodes)s) AS n(
    key text, kind text, action_type text, executor_key text,
    config jsonb, timeout_policy jsonb, position integer
)
