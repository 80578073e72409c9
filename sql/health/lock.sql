-- One health writer at a time across runtimes: the upserts and orphan sweeps
-- of two passes never interleave (no deadlocks, no flapping registered flag
-- mid-pass). Released at commit.
SELECT pg_advisory_xact_lock(hashtextextended('qtg.executor_health', 0))
