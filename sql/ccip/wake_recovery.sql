-- A released intent's node is recovery's to resolve: wake node_recovery now.
SELECT pg_notify('qtg_recover', '')
