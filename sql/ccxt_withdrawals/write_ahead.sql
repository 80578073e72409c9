-- Write-ahead of a withdraw request: the attempt's client id and what it asks for.
-- A second submit of the same attempt keeps the first row (and its sent_at).
INSERT INTO ccxt_withdrawal_attempts
    (request_node_id, attempt_no, venue, client_id, asset, amount, address)
VALUES
    (%(request_node_id)s, %(attempt_no)s, %(venue)s, %(client_id)s, %(asset)s, %(amount)s,
     %(address)s)
ON CONFLICT (request_node_id, attempt_no) DO NOTHING
