-- Executors this runtime no longer registers.
UPDATE executors
SET registered = false
WHERE registered
  AND NOT (executor_key = ANY(%(keys)s::text[]))
