-- Shutdown watchdog: cancel the statements this runtime process still runs
-- (its workers' pool connections carry application_name 'qtg-runtime:<pid>',
-- its API pool's 'qtg-runtime:<pid>:api'), so a statement blocked on a lock
-- cannot hold the exit up until statement_timeout. A cancelled statement
-- fails and its transaction rolls back.
SELECT pg_cancel_backend(pid) AS cancelled
FROM pg_stat_activity
WHERE application_name IN (%(application_name)s, %(application_name)s || ':api')
  AND state = 'active'
  AND pid <> pg_backend_pid()
