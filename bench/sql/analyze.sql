-- qtg-bench: fresh statistics (what autovacuum would have taken by now).
ANALYZE
