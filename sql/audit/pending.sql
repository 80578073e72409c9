-- Outbox rows visible now, oldest id first. Promoted rows are deleted in the
-- same transaction, so there is no cursor that a late-committing row could
-- fall behind (DESIGN §9): it is simply promoted by a later pass.
SELECT id AS outbox_id, actor, action, object_type, object_id, detail, occurred_at
FROM audit_outbox
ORDER BY id ASC
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
