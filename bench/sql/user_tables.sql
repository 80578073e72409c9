-- qtg-bench: the tables of one database (for per-table autovacuum settings).
SELECT /* qtg-bench */ relname FROM pg_stat_user_tables ORDER BY relname
