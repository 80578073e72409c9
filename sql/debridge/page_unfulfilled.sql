-- An order no taker fulfilled past MG_DEBRIDGE_UNFULFILLED_PAGE_SECONDS: one open page
-- per order (raising it again only counts the occurrence).
SELECT qtg_raise_notification(
    'debridge_unfulfilled', 'warning', %(dedupe_key)s, %(subject)s, %(body)s, %(links)s,
    %(request_id)s, %(node_key)s) AS id
