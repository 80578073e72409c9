-- The write-ahead row of a node attempt, with the database's clock for the grace rules.
SELECT venue, client_id, asset, amount, address, sent_at, withdrawal_id, absent_seen_at,
       now() AS db_now
FROM ccxt_withdrawal_attempts
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
