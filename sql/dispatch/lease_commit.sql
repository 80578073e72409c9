-- A claim transaction that wrote only leases and policy holds commits without
-- waiting for its WAL flush (qtg.services.dispatch.commit_lease_asynchronously
-- says why that is safe: a lease is no state; the write-ahead's synchronous
-- commit flushes it). SET LOCAL: this transaction only, read at its COMMIT.
SET LOCAL synchronous_commit TO off
