-- evm_nonce_reservations (issue 11; the reference's evm_nonce_reservation).
-- One row per (chain, address, nonce). States and rules:
--   reserved  -> taken for one node attempt; tx_hash set once signed (write-ahead,
--                before eth_sendRawTransaction) so a crash leaves evidence to look up
--   broadcast -> eth_sendRawTransaction accepted it
--   consumed  -> the chain used the nonce (final)
--   released  -> never broadcast and not used on chain: the next reservation of
--                this address takes it back first, so no gap is left behind
-- A released nonce is reused before a new one is minted: a nonce that is never
-- broadcast blocks every later transaction of that address.
CREATE TABLE evm_nonce_reservations (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id         bigint NOT NULL CHECK (chain_id > 0),
    address          text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    nonce            bigint NOT NULL CHECK (nonce >= 0),
    state            text NOT NULL DEFAULT 'reserved'
                     CHECK (state IN ('reserved', 'broadcast', 'consumed', 'released')),
    request_node_id  text,
    attempt_no       integer,
    tx_hash          text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    attention_raised boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chain_id, address, nonce)
);
-- one live reservation per node attempt
CREATE UNIQUE INDEX evm_nonce_reservations_attempt
    ON evm_nonce_reservations (request_node_id, attempt_no) WHERE state <> 'released';
CREATE INDEX evm_nonce_reservations_open
    ON evm_nonce_reservations (updated_at) WHERE state IN ('reserved', 'broadcast');

-- verify_drift (reference §13): the on-chain baselines, recorded the first time a
-- check is made (trust on first use), and the drift findings against them.
CREATE TABLE drift_baselines (
    chain_id    bigint NOT NULL,
    subject     text NOT NULL,          -- 'chain' or a contract/signer address
    check_name  text NOT NULL,          -- chain_id, reachable, code_hash, decimals, symbol
    expected    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain_id, subject, check_name)
);

CREATE TABLE drift_findings (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id    bigint NOT NULL,
    subject     text NOT NULL,
    check_name  text NOT NULL,
    expected    text NOT NULL,
    observed    text NOT NULL,
    evidence    jsonb NOT NULL DEFAULT '{}'::jsonb,
    found_at    timestamptz NOT NULL DEFAULT now(),
    cleared_at  timestamptz
);
-- one open finding per check: a drift that persists is one finding, not one per pass
CREATE UNIQUE INDEX drift_findings_open
    ON drift_findings (chain_id, subject, check_name) WHERE cleared_at IS NULL;
