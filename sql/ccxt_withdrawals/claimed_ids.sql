-- Withdrawal ids already tied to another node attempt (address+amount matching must
-- never adopt one withdrawal for two nodes).
SELECT withdrawal_id FROM ccxt_withdrawal_attempts
WHERE withdrawal_id IS NOT NULL
  AND NOT (request_node_id = %(request_node_id)s AND attempt_no = %(attempt_no)s)
