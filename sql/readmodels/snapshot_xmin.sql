-- The oldest transaction still running: every xid below it has finished.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin
