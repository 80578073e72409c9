-- The requests whose snapshot this transaction reads next, named in the
-- transaction-local setting qtg.claimed_requests — as a batch claim names the
-- requests it locked (sql/dispatch/claim_batch.sql) — for load_request.sql,
-- load_nodes.sql and load_plan_edges.sql, which take no parameters (issue 29).
--
-- Why not pass the ids to each load: a statement with a parameter array is
-- planned anew on every call. The planner estimates an array parameter at ten
-- elements in a cached generic plan and at its real length in a custom one, so
-- the generic plan always looked dearer and PostgreSQL never kept it: 128 µs of
-- planning per node load against 23 µs of execution (pg_stat_statements with
-- track_planning, a pickup run). A statement with no parameter, once psycopg
-- prepares it, is planned once per connection and its plan reused (with
-- MG_DATABASE_PGBOUNCER nothing is prepared, so planning stays per call).
SELECT set_config('qtg.claimed_requests', %(request_ids)s::uuid[]::text, true) IS NOT NULL
    AS named
