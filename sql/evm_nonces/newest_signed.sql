-- The newest signed transaction of a reservation (its tx_hash names it): the bytes to rebroadcast.
SELECT s.tx_hash, s.raw, s.kind FROM evm_signed_transactions s
WHERE s.tx_hash = %(tx_hash)s
