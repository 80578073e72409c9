-- Whether the server keeps planner statistics fresh on its own: autovacuum
-- (which also runs ANALYZE) needs both settings on. Read once at start-up.
SELECT current_setting('autovacuum')::boolean
       AND current_setting('track_counts')::boolean AS enabled
