-- evm_nonce_reaper: the chain's verdict on one claimed row — only while the claimed owner
-- (node attempt) still holds it in the claimed state (issue 44 item 5).
UPDATE evm_nonce_reservations SET state = %(state)s, updated_at = now()
WHERE id = %(id)s AND state = %(from_state)s
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
