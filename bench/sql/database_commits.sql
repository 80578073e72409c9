-- qtg-bench: commits and rollbacks of one database so far.
SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %(db)s
