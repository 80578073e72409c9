-- The primary's replication state as this session sees it (issue 27): the
-- synchronous standbys configured, the standbys streaming and how, and the
-- synchronous_commit level in force for this session (the pool's, or the
-- role's behind pgbouncer). sync_state and state are NULL for a role without
-- pg_read_all_stats (or pg_monitor): counted as `unreadable`.
SELECT current_setting('synchronous_standby_names') AS synchronous_standby_names,
       current_setting('synchronous_commit') AS synchronous_commit,
       pg_is_in_recovery() AS in_recovery,
       (SELECT count(*) FROM pg_stat_replication) AS standbys,
       (SELECT count(*) FROM pg_stat_replication
         WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')) AS synchronous_standbys,
       (SELECT count(*) FROM pg_stat_replication WHERE state IS NULL) AS unreadable
