-- The ledger reconciles itself with the chain before it signs (issue 43 item 2).
-- qtg records every nonce it signs before the bytes leave (evm_nonce_reservations,
-- evm_signed_transactions), so the chain's count for a signer is never ahead of what
-- the ledger knows — unless the ledger lost history (an asynchronous failover, a
-- restore from a backup) or a second system uses the key. When it is, the unknown
-- transactions are read from their blocks and kept here, each with what it was found
-- to be (qtg.domain.ledger.match_payments):
--   adopted       -> exactly the transfer of one node (destination, asset, amount,
--                    calldata) of a movement no younger than its block: that node is
--                    observed from this transaction, never signed again
--   unmatched     -> the payment of no node qtg knows: the signer stays held
--                    (evm_signer_holds) until a person clears it
--   prior_history -> found when the ledger knew nothing of the account yet (first use
--                    of a key with history): matched nothing, holds nothing
-- A nonce kept here is known to the ledger: the next signature starts above it.
CREATE TABLE evm_ledger_adoptions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id        bigint NOT NULL CHECK (chain_id > 0),
    address         text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    nonce           bigint NOT NULL CHECK (nonce >= 0),
    tx_hash         text NOT NULL UNIQUE CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    block_number    bigint NOT NULL CHECK (block_number >= 0),
    disposition     text NOT NULL CHECK (disposition IN ('adopted', 'unmatched', 'prior_history')),
    request_node_id text,
    -- the transaction as the chain shows it: to, value, input (the evidence of the match)
    evidence        jsonb NOT NULL DEFAULT '{}'::jsonb,
    found_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chain_id, address, nonce),
    CHECK ((disposition = 'adopted') = (request_node_id IS NOT NULL))
);
-- one adopted transaction per node: a node pays once
CREATE UNIQUE INDEX evm_ledger_adoptions_node
    ON evm_ledger_adoptions (request_node_id) WHERE disposition = 'adopted';
