SELECT to_regclass('schema_migrations') IS NOT NULL AS present
