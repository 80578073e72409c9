-- The ledger's check before it signs (issue 43 item 2) asks, at every reservation, for
-- the account's reservations that never kept signed bytes below the chain's count
-- (sql/evm_nonces/ledger_known.sql): few rows (in flight, released, consumed by another
-- transaction), found here without walking the account's history.
CREATE INDEX evm_nonce_reservations_unsigned
    ON evm_nonce_reservations (chain_id, address, nonce) WHERE tx_hash IS NULL;
