-- A released nonce below live ones, taken for a zero-value self-transfer (the gap fill):
-- only while it is still released by the owner read under the account lock (issue 44 item 5).
UPDATE evm_nonce_reservations
SET state = 'broadcast', request_node_id = 'gap_fill', attempt_no = NULL,
    tx_hash = %(tx_hash)s, attention_raised = false, not_landed_seen_at = NULL, updated_at = now()
WHERE id = %(id)s AND state = 'released'
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
RETURNING id
