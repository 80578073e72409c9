-- qtg-bench: top-level statements one database ran (pg_stat_statements), the
-- benchmark's own (marked /* qtg-bench */) left out: one call = one round trip.
SELECT s.query, sum(s.calls)::bigint AS calls, sum(s.total_exec_time) AS exec_ms
FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = %(db)s
  AND s.query NOT LIKE %(marker)s
GROUP BY s.query
ORDER BY calls DESC
