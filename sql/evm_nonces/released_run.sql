-- The lowest run of %(count)s consecutive released nonces at or above the chain's count:
-- reserve_run reuses a run whole (its transactions must follow one another).
SELECT r.nonce FROM evm_nonce_reservations r
WHERE r.chain_id = %(chain_id)s AND r.address = %(address)s AND r.state = 'released'
  AND r.nonce >= %(floor)s
  AND (SELECT count(*) FROM evm_nonce_reservations s
       WHERE s.chain_id = r.chain_id AND s.address = r.address AND s.state = 'released'
         AND s.nonce BETWEEN r.nonce AND r.nonce + %(count)s - 1) = %(count)s
ORDER BY r.nonce
LIMIT 1
