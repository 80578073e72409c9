-- Session advisory lock: two runtimes starting at once migrate one after the other.
SELECT pg_advisory_lock(hashtext('qtg.migrate'))
