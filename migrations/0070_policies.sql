-- Issue 45: treasury policies, the address book and the accumulation ledger.
--
-- policy_versions: every proposed policy document, numbered. At most one is
-- ACTIVE; approving a PROPOSED version (an admin other than its proposer)
-- makes it ACTIVE and the one before SUPERSEDED, in one transaction. No ACTIVE
-- row means no policy: movements behave as before issue 45.
CREATE TABLE policy_versions (
    version         bigserial PRIMARY KEY,
    document        jsonb NOT NULL,
    document_hash   text NOT NULL,
    state           text NOT NULL DEFAULT 'PROPOSED'
        CHECK (state IN ('PROPOSED', 'ACTIVE', 'SUPERSEDED', 'REJECTED')),
    proposed_by     text NOT NULL,
    proposed_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    decided_by      text,
    decided_at      timestamptz,
    note            text,
    CHECK (decided_by IS NULL OR state = 'REJECTED' OR decided_by <> proposed_by)
);
CREATE UNIQUE INDEX policy_versions_one_active ON policy_versions ((true)) WHERE state = 'ACTIVE';

-- address_book_entries: a destination a treasury pays. Proposed by one admin,
-- approved by another; usable only from usable_at (approval + the cooling-off
-- time, MG_ADDRESS_BOOK_COOLING_OFF_SECONDS). A change is a new PROPOSED row
-- naming the entry it replaces; its approval retires the old one (REMOVED).
CREATE TABLE address_book_entries (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    chain           text NOT NULL,
    asset           text NOT NULL,
    address         text NOT NULL,
    label           text NOT NULL,
    tags            text[] NOT NULL DEFAULT '{}',
    state           text NOT NULL DEFAULT 'PROPOSED'
        CHECK (state IN ('PROPOSED', 'ACTIVE', 'REJECTED', 'REMOVED')),
    replaces        uuid REFERENCES address_book_entries (id),
    proposed_by     text NOT NULL,
    proposed_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    decided_by      text,
    decided_at      timestamptz,
    usable_at       timestamptz,
    CHECK (decided_by IS NULL OR state = 'REJECTED' OR decided_by <> proposed_by),
    CHECK (state <> 'ACTIVE' OR usable_at IS NOT NULL)
);
CREATE INDEX address_book_entries_address ON address_book_entries (lower(address))
    WHERE state = 'ACTIVE';
CREATE UNIQUE INDEX address_book_entries_active_label ON address_book_entries (label)
    WHERE state = 'ACTIVE';

-- The policy a movement was created (and approved) under, and the rule that matched.
ALTER TABLE movement_requests
    ADD COLUMN policy_version bigint REFERENCES policy_versions (version),
    ADD COLUMN policy_rule text,
    ADD COLUMN policy_approvals jsonb,
    ADD COLUMN policy_delay_seconds integer;

-- Each approval of a policy-governed movement: who, with which role, under
-- which version and rule. The movement is APPROVED once the rule's count of
-- eligible, distinct principals (never its creator) is reached.
CREATE TABLE movement_approvals (
    request_id      uuid NOT NULL REFERENCES movement_requests (id),
    principal       text NOT NULL,
    principal_role  text NOT NULL,
    policy_version  bigint REFERENCES policy_versions (version),
    policy_rule     text,
    approved_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (request_id, principal)
);

-- The accumulation ledger: one row per policy-governed movement, written at
-- its dispatch in the transaction of its write-ahead, under the policy's
-- advisory lock (qtg/services/policies.py), so that the sums a dispatch reads
-- include every movement that went out before it.
CREATE TABLE policy_charges (
    request_id      uuid PRIMARY KEY REFERENCES movement_requests (id),
    asset           text NOT NULL,
    destination     text NOT NULL,
    initiator       text NOT NULL,
    amount          numeric NOT NULL CHECK (amount > 0),
    policy_version  bigint NOT NULL REFERENCES policy_versions (version),
    policy_rule     text NOT NULL,
    charged_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX policy_charges_charged_at ON policy_charges (charged_at);
