-- The ledger found transactions of its signer it had no record of (issue 43 item 2):
-- history was lost (asynchronous failover, restore from a backup) or a second system
-- uses the key. Critical, and open until a person resolves it, even when every one of
-- them was adopted as a node's payment: a database that lost its last writes is a
-- person's business.
SELECT qtg_raise_notification(
    'evm_ledger_behind_chain', 'critical',
    'evm_ledger_behind_chain:' || %(chain_id)s::text || ':' || %(address)s,
    %(subject)s, %(body)s, %(links)s) AS id
