-- The audit chain has one writer at a time: a transaction-level advisory lock,
-- released by commit or rollback, so two runtimes never interleave prev_hash.
-- The loser does not wait; its pass returns 0 and the winner drains the outbox.
SELECT pg_try_advisory_xact_lock(hashtextextended('qtg.audit_outbox_promoter', 0)) AS locked
