-- qtg-bench: the server's clock (commit times are read against it).
SELECT /* qtg-bench */ clock_timestamp() AS now
