-- The reorg watch (evm_nonce_reaper between its full passes): per account, the highest
-- nonce consumed in the last %(window_seconds)s. The chain's count at or below it means a
-- payment left the canonical chain: that account is reconciled at once.
SELECT chain_id, address, max(nonce) AS top
FROM evm_nonce_reservations
WHERE state = 'consumed' AND updated_at > now() - make_interval(secs => %(window_seconds)s)
GROUP BY chain_id, address
