-- The signed bytes were (re)broadcast now.
UPDATE evm_signed_transactions SET last_broadcast_at = now() WHERE tx_hash = %(tx_hash)s
