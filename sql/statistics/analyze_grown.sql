-- The tables that grew past their statistics, analyzed now (migration 0061's
-- qtg_analyze_grown says when): their cached plans are made again.
SELECT table_name FROM qtg_analyze_grown(%(factor)s, %(min_rows)s) AS table_name
