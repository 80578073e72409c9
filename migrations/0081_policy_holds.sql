-- Issue 44 item 3: a policy-governed movement's charge held while its node is
-- prepared and signed with no lock held (qtg/services/dispatch.py).
--
-- The dispatcher decides a movement under the policy ledger's lock in its claim
-- and, allowed, holds its amount here with the node's dispatch lease (lease,
-- until: the lease's expiry), committed with the claim. Every later decision
-- counts a live hold as used (sql/policies/sum_charges.sql), so no other
-- movement goes out on the same room while this one prepares. The write-ahead
-- transaction decides again (its own hold excluded), writes the charge
-- (policy_charges) with its write-ahead and drops the hold; a discarded attempt
-- drops it too; a hold whose lease expired (its dispatcher died) counts for
-- nothing. No foreign key: a hold is transient and never keeps a movement from
-- being deleted.
CREATE TABLE policy_holds (
    request_id   uuid PRIMARY KEY,
    lease        uuid NOT NULL,
    asset        text NOT NULL,
    destination  text NOT NULL,
    initiator    text NOT NULL,
    amount       numeric NOT NULL CHECK (amount > 0),
    until        timestamptz NOT NULL
);
