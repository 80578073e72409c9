-- Policy versions and address-book entries change one decision at a time: two
-- admins approving two proposals at once would otherwise each read "the active
-- one" from before the other's commit.
SELECT pg_advisory_xact_lock(hashtextextended('qtg.policy_changes', 0))
