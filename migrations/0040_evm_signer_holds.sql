-- Signer holds (issue 43): a signer whose key may be used by someone else (its nonce
-- consumed by a transaction qtg never signed), or whose ledger has lost what it signed,
-- must sign nothing new until a person has looked. A hold stops every new signature of
-- that signer on that chain (chain_id NULL: on every chain): its nodes wait (RetryLater
-- EVM_SIGNER_HELD), never FAILED, and placing it raises a critical notification in the
-- same transaction. Kept bytes of payments already signed are still broadcast: they are
-- payments qtg made, and stranding them helps no one.
CREATE TABLE evm_signer_holds (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id    bigint CHECK (chain_id > 0),
    address     text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    -- why, as an error code (FOREIGN_NONCE_CONSUMER, LEDGER_BEHIND_CHAIN, ...)
    reason      text NOT NULL CHECK (reason ~ '^[A-Z][A-Z0-9_]{0,63}$'),
    -- what showed it: the foreign transaction's hash and block, the counts, ...
    evidence    jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(evidence) = 'object'),
    created_by  text NOT NULL CHECK (created_by <> ''),
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- placing an active hold again counts here (idempotent: one hold, one page)
    occurrences integer NOT NULL DEFAULT 1,
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    cleared_at  timestamptz,
    cleared_by  text,
    clear_evidence text,
    CHECK ((cleared_at IS NULL) = (cleared_by IS NULL)),
    CHECK (cleared_at IS NULL OR (clear_evidence IS NOT NULL AND clear_evidence <> ''))
);
-- One active hold per (chain or every chain, signer, reason).
CREATE UNIQUE INDEX evm_signer_holds_active
    ON evm_signer_holds (coalesce(chain_id, 0), address, reason) WHERE cleared_at IS NULL;
-- The check before every signature: active holds of one signer.
CREATE INDEX evm_signer_holds_signer ON evm_signer_holds (address) WHERE cleared_at IS NULL;
