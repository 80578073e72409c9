-- Give this transaction an xid and return it: an xid larger than that of every
-- transaction that had one before this statement ran (see qtg/api/feed.py).
SELECT pg_current_xact_id()::text::bigint AS bound
