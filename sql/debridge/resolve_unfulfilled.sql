-- The order was fulfilled, or cancelled and refunded: its page is over.
SELECT qtg_resolve_notification(%(dedupe_key)s) AS resolved
