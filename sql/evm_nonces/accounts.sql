-- The (chain, address) pairs evm_nonce_reaper reconciles with the chain: any with a live or
-- released reservation, or one settled in the last day (a reorg can undo it).
SELECT DISTINCT chain_id, address FROM evm_nonce_reservations
WHERE state IN ('reserved', 'broadcast', 'released') OR updated_at > now() - interval '1 day'
