-- The first read of the venue's history, after the grace, that did not show the attempt.
UPDATE ccxt_withdrawal_attempts SET absent_seen_at = COALESCE(absent_seen_at, now())
WHERE request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s
RETURNING absent_seen_at
