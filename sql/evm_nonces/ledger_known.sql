-- What the ledger knows it signed for one account (issue 43 item 2), read under the
-- account lock: the next nonce it has no record of (one above its highest live
-- reservation, written-ahead signed bytes or adopted chain transaction) and whether it
-- knows the account at all (false: the first use of this signer on this chain).
-- Released reservations do not count: a released nonce was never broadcast.
SELECT coalesce(greatest(
           (SELECT max(nonce) FROM evm_nonce_reservations
            WHERE chain_id = %(chain_id)s AND address = %(address)s AND state <> 'released'),
           (SELECT max(nonce) FROM evm_signed_transactions
            WHERE chain_id = %(chain_id)s AND address = %(address)s),
           (SELECT max(nonce) FROM evm_ledger_adoptions
            WHERE chain_id = %(chain_id)s AND address = %(address)s)
       ) + 1, 0) AS known_next,
       EXISTS (SELECT 1 FROM evm_nonce_reservations
               WHERE chain_id = %(chain_id)s AND address = %(address)s)
       OR EXISTS (SELECT 1 FROM evm_ledger_adoptions
                  WHERE chain_id = %(chain_id)s AND address = %(address)s) AS known
