-- qtg-bench: this connection's backend (its CPU is the benchmark's, not qtg's).
SELECT pg_backend_pid() AS pid
