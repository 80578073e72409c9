-- Settings in force (as SHOW prints them), reported beside the figures.
SELECT name, current_setting(name) AS value FROM pg_settings WHERE name = ANY(%(names)s) ORDER BY name
