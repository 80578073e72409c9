-- The condition behind this dedupe key is over: its next occurrence pages again.
SELECT qtg_resolve_notification(%(dedupe_key)s) AS resolved
