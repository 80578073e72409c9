-- A refused signature pages at once, critical: a movement edited after approval or
-- a signer that is not the enrolled one is never a transient condition. One open
-- notification per node and reason (the dispatcher retries the node and raises it
-- again; that only counts the occurrence).
SELECT qtg_raise_notification(
    'custody_refusal', 'critical', %(dedupe_key)s, %(subject)s, %(body)s, %(links)s,
    %(request_id)s, %(node_key)s) AS id
