-- qtg-bench: autovacuum (and auto-analyze) off or back to the server's default
-- for one table; {table} is filled with sql.Identifier, {options} is fixed text.
ALTER TABLE {table} {options}
