-- Transactions of this database that hold the event-writer lock (7435367, 1),
-- taken by qtg_next_event_id() before an event id (migrations/0006): the
-- ones that may still commit an event the feed has not seen.
SELECT coalesce(array_agg(virtualtransaction), '{}') AS writers
FROM pg_locks
WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = 7435367 AND objid = 1 AND objsubid = 2
