-- qtg-bench: rows and bytes (with indexes and TOAST) of one table a waiting
-- movement can grow; {table} is filled with sql.Identifier, %(name)s is its name.
SELECT /* qtg-bench */ count(*) AS rows, pg_total_relation_size(%(name)s::regclass) AS bytes
FROM {table}
