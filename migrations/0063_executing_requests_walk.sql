-- Issue 44 item 5: the settle sweep reads a window of EXECUTING requests of its
-- class in (created_at, id) order from a cursor (sql/node_attention/unsettled.sql).
-- movement_requests_class_state_created (network_class, request_state,
-- created_at) has no id to break ties, so each window sorted every EXECUTING
-- request of the class (7.7k of tests/test_plans.py's burst) to return 50.
-- request_state is in that index already: no write that was HOT stops being so.
CREATE INDEX movement_requests_executing_walk
    ON movement_requests (network_class, created_at, id)
    WHERE request_state = 'EXECUTING';
