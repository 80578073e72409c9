-- Applied migrations, or nothing when the table does not exist yet.
SELECT version, checksum
FROM schema_migrations
ORDER BY version
