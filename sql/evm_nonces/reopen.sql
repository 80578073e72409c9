-- A reorg undid a consumed nonce (the chain's count is at or below it again): it is live
-- again, broadcast, so its signed bytes are sent again and nothing mints above a hole.
UPDATE evm_nonce_reservations SET state = 'broadcast', updated_at = now()
WHERE id = %(id)s AND state = 'consumed'
