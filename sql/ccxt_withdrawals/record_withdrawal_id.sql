-- The venue's id of the attempt's withdrawal, once known (its reply or its history).
UPDATE ccxt_withdrawal_attempts SET withdrawal_id = %(withdrawal_id)s, absent_seen_at = NULL
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
