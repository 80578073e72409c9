SELECT executor_key, action_types, health_state, health_detail, last_health_at, registered,
       updated_at
FROM executors
ORDER BY executor_key
