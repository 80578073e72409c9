-- A decision holds the proposal until it commits, so two reviewers cannot
-- both decide it, and the expiration worker (SKIP LOCKED) passes it by.
SELECT p.*, (p.expires_at IS NOT NULL AND p.expires_at <= now()) AS past_deadline
FROM template_proposals p
WHERE p.id = %(proposal_id)s
FOR UPDATE
