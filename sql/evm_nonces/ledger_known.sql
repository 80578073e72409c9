-- What the ledger knows it signed for one account (issue 43 item 2), read under the
-- account lock with the chain's highest count (`top`):
--   known_next     one above the highest nonce it kept signed bytes (or a signed hash)
--                  for, written ahead of every broadcast, or adopted from the chain: the chain's count is never
--                  above it unless the ledger lost history or the key is used elsewhere;
--   known          whether it knows the account at all (false: first use of this signer);
--   unsigned_below nonces the chain has used (below `top`) that the ledger reserved but
--                  never kept bytes for, nor adopted: nothing of qtg's can have consumed
--                  them (bytes are kept before they leave), so their transactions are
--                  unknown too — an asynchronous failover loses the signed bytes of
--                  reservations made just before it.
WITH known AS (
    SELECT coalesce(greatest(
               (SELECT max(nonce) FROM evm_signed_transactions
                WHERE chain_id = %(chain_id)s AND address = %(address)s),
               -- a reservation pointing at its signed transaction (rows signed before
               -- evm_signed_transactions kept bytes have only this)
               (SELECT max(nonce) FROM evm_nonce_reservations
                WHERE chain_id = %(chain_id)s AND address = %(address)s
                  AND tx_hash IS NOT NULL),
               (SELECT max(nonce) FROM evm_ledger_adoptions
                WHERE chain_id = %(chain_id)s AND address = %(address)s)
           ) + 1, 0) AS known_next
)
SELECT known.known_next,
       EXISTS (SELECT 1 FROM evm_nonce_reservations
               WHERE chain_id = %(chain_id)s AND address = %(address)s)
       OR EXISTS (SELECT 1 FROM evm_ledger_adoptions
                  WHERE chain_id = %(chain_id)s AND address = %(address)s) AS known,
       ARRAY(
           SELECT r.nonce
           FROM evm_nonce_reservations r
           WHERE r.chain_id = %(chain_id)s AND r.address = %(address)s AND r.tx_hash IS NULL
             AND r.nonce < least(%(top)s::bigint, known.known_next)
             AND NOT EXISTS (SELECT 1 FROM evm_signed_transactions s
                             WHERE s.chain_id = r.chain_id AND s.address = r.address
                               AND s.nonce = r.nonce)
             AND NOT EXISTS (SELECT 1 FROM evm_ledger_adoptions a
                             WHERE a.chain_id = r.chain_id AND a.address = r.address
                               AND a.nonce = r.nonce)
           ORDER BY r.nonce
           LIMIT 256
       ) AS unsigned_below
FROM known
