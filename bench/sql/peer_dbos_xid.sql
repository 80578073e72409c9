-- The id of the transaction that enqueues a DBOS workflow, read inside it (before its
-- commit), for the enqueue's commit timestamp (bench/peer_dbos.py).
SELECT pg_current_xact_id()::xid::text
