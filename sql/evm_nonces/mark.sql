-- Move a reservation forward (broadcast / consumed / released); never out of consumed.
-- Only the owner's (issue 44 item 5): the node attempt that holds it — its node id, or a
-- key of that node's (`<node id>:approve[:token]`, an allowance raise), and its attempt.
-- A nonce released and taken since by another attempt (or by the reaper's gap fill) is
-- not this writer's any more, and a late write of the old owner (a release after a
-- refusal, a consumed after a look) must not move it.
UPDATE evm_nonce_reservations SET state = %(state)s, updated_at = now()
WHERE chain_id = %(chain_id)s AND address = %(address)s AND nonce = %(nonce)s
  AND split_part(request_node_id, ':', 1) = %(owner)s AND attempt_no = %(attempt_no)s
  AND state <> 'consumed'
RETURNING id
