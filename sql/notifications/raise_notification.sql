-- The hook for services (capital transfers; drift findings, stranded CCIP
-- intents, stale balances when they land): one open notification per dedupe key.
SELECT qtg_raise_notification(
    %(kind)s, %(severity)s, %(dedupe_key)s, %(subject)s, %(body)s, %(links)s,
    %(request_id)s, %(node_key)s) AS id
