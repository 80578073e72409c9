-- qtg-bench: the next transaction id to be assigned (server-wide; assigns none
-- itself). Its growth over a drain is the number of write transactions
-- committed or rolled back — read-only ones get no id — counted at once,
-- unlike pg_stat_database, whose counters backends report up to a second late.
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid
