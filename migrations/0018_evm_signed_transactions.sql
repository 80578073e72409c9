-- Never pay twice (issue 24): every transaction qtg signs for a nonce is kept, with its
-- raw bytes, before it is broadcast: the payment, each fee-bumped replacement at the
-- same nonce, and evm_nonce_reaper's zero-value gap fills. While the nonce is
-- unconsumed the newest bytes are broadcast again (the same bytes are the same
-- transaction); once the chain consumed it, the receipts of these hashes decide the
-- outcome (qtg.domain.chain_outcome). Raw signed transactions hold no secret: they
-- are what the chain publishes anyway.
CREATE TABLE evm_signed_transactions (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id                 bigint NOT NULL CHECK (chain_id > 0),
    address                  text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    nonce                    bigint NOT NULL CHECK (nonce >= 0),
    kind                     text NOT NULL CHECK (kind IN ('payment', 'replacement', 'gap_fill')),
    request_node_id          text,
    attempt_no               integer,
    tx_hash                  text NOT NULL UNIQUE CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    raw                      text NOT NULL CHECK (raw ~ '^0x[0-9a-f]+$'),
    -- the unsigned transaction (evm_tx_json) the raw bytes sign: a replacement re-signs it
    payload                  jsonb NOT NULL,
    max_fee_per_gas          numeric(78, 0) NOT NULL,
    max_priority_fee_per_gas numeric(78, 0) NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    last_broadcast_at        timestamptz
);
CREATE INDEX evm_signed_transactions_nonce
    ON evm_signed_transactions (chain_id, address, nonce, id);

-- When a judgement first found the reservation's nonce used by a transaction that is
-- not ours (NULL: never, or contradicted since). A second judgement at least
-- MG_EVM_NOT_LANDED_CONFIRM_SECONDS later must agree before a new attempt is made.
ALTER TABLE evm_nonce_reservations ADD COLUMN not_landed_seen_at timestamptz;
