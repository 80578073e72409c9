-- One account's reservations at or above the chain's transaction count, lowest first, under
-- the account lock: what a reconcile pass may rebroadcast, reopen or gap-fill.
SELECT id, nonce, state, tx_hash, request_node_id, attempt_no,
       updated_at < now() - make_interval(secs => %(stale_seconds)s) AS stale,
       updated_at < %(pass_started)s AS before_pass
FROM evm_nonce_reservations
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce >= %(floor)s
ORDER BY nonce
