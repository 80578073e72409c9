-- Issue 45 item 5: the signer checks what it signs. The approval writes, in its
-- own transaction, a seal over the movement's money-moving content as approved
-- (qtg.domain.custody.approval_seal: intent, input params, plan hash, every
-- node's action type, executor and config). Before signing, the same hash is
-- taken over the rows as they are then: a row edited after approval is refused,
-- never signed. NULL: not approved (or approved before this migration: such a
-- movement is refused at signing and paged; the operator cancels it and creates
-- it again).
ALTER TABLE movement_requests ADD COLUMN approval_seal text;
