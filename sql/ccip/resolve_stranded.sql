-- A stranded intent whose chain has answered since: its page is over (the
-- notification sql/ccip/strand.sql raised; the next stranding pages again).
SELECT qtg_resolve_notification(%(dedupe_key)s) AS resolved
