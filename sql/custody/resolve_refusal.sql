-- The node that was refused has now been signed (the operator fixed the cause): its
-- page is resolved, so a later refusal of the same kind pages again.
SELECT qtg_resolve_notification(%(dedupe_key)s) AS resolved
