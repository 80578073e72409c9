-- Issue 44 item 4: the runtime refreshes the planner statistics of a table that
-- grew, so that the plans its connections cached while the table was small are
-- made again (an ANALYZE invalidates every cached plan of the table).
--
-- A connection keeps the generic plan of each statement it runs often. Made on
-- a table whose statistics say it is empty (ANALYZEd empty: a restore, a
-- `vacuumdb --analyze`, autovacuum after a retention purge), every path costs
-- one row, and a claim's probe of a request by primary key came out as a walk
-- of movement_requests_created filtered by id, kept as the table grew; with
-- autovacuum off (or lagging a burst) nothing made it again.
--
-- A table is analyzed when it holds at least `min_rows` live rows and more
-- than `factor` times the rows its statistics count (never analyzed: none).
-- One runtime at a time (a transaction-level advisory try-lock: the others
-- skip the round); a table the role does not own is skipped by ANALYZE with a
-- warning. Returns the tables analyzed.
CREATE FUNCTION qtg_analyze_grown(factor double precision, min_rows bigint)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    grown record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('qtg_analyze_grown')) THEN
        RETURN;
    END IF;
    FOR grown IN
        SELECT s.schemaname, s.relname
        FROM pg_stat_user_tables s
        JOIN pg_class c ON c.oid = s.relid
        WHERE s.n_live_tup >= min_rows
          AND s.n_live_tup > factor * greatest(c.reltuples, 0)
        ORDER BY s.n_live_tup DESC
    LOOP
        EXECUTE format('ANALYZE %I.%I', grown.schemaname, grown.relname);
        RETURN NEXT grown.relname;
    END LOOP;
END;
$$;
