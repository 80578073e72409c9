-- Round trips per node are counted from pg_stat_statements (top-level statements).
CREATE EXTENSION IF NOT EXISTS pg_stat_statements
