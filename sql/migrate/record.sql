INSERT INTO schema_migrations (version, checksum) VALUES (%(version)s, %(checksum)s)
