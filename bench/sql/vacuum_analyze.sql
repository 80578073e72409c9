-- qtg-bench: a prepared database starts with fresh statistics and no dead rows.
VACUUM (ANALYZE)
