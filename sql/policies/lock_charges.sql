-- Issue 45: the accumulation ledger has one writer at a time. Held until the
-- dispatching transaction commits its write-ahead and its charge together, so
-- no two runtimes read the same sum and both go out past a limit. One lock for
-- every scope: a batch may charge several scopes and must never wait on one
-- while holding another.
SELECT pg_advisory_xact_lock(hashtextextended('qtg.policy_charges', 0))
