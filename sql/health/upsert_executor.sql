-- health_state 'unknown' with reported = false means the executor has no
-- health(): the state stays unknown and last_health_at keeps its old value.
INSERT INTO executors (
    executor_key, action_types, health_state, health_detail, last_health_at, registered
)
VALUES (
    %(key)s, %(action_types)s, %(health_state)s, %(health_detail)s,
    CASE WHEN %(reported)s THEN now() END, true
)
ON CONFLICT (executor_key) DO UPDATE SET
    action_types = EXCLUDED.action_types,
    health_state = EXCLUDED.health_state,
    health_detail = EXCLUDED.health_detail,
    last_health_at = coalesce(EXCLUDED.last_health_at, executors.last_health_at),
    registered = true
