UPDATE balance_rollup_progress
SET rolled_through = %(rolled_through)s, updated_at = now()
WHERE bucket = %(bucket)s
