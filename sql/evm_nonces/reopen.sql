-- A reorg undid a consumed nonce (the chain's count is at or below it again): it is live
-- again, broadcast, so its signed bytes are sent again and nothing mines above a hole.
-- Only while the owner read under the account lock still holds it (issue 44 item 5).
UPDATE evm_nonce_reservations SET state = 'broadcast', updated_at = now()
WHERE id = %(id)s AND state = 'consumed'
  AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
  AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
RETURNING id
