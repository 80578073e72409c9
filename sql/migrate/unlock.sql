SELECT pg_advisory_unlock(hashtext('qtg.migrate'))
