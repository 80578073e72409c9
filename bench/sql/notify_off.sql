-- qtg-bench: silence the notify triggers for every new session of one database
-- (qtg_notify() checks qtg.notify), to price reactivity.
ALTER DATABASE {db} SET qtg.notify = off
