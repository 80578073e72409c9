-- template_proposal_expiration (reference §8): stale PENDING_REVIEW proposals
-- → EXPIRED. SKIP LOCKED: a proposal a reviewer is deciding right now is left
-- to that decision.
WITH due AS (
    SELECT id
    FROM template_proposals
    WHERE proposal_state = 'PENDING_REVIEW'
      AND expires_at IS NOT NULL
      AND expires_at < now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE template_proposals AS p
SET proposal_state = 'EXPIRED'
FROM due
WHERE p.id = due.id
RETURNING p.id, p.template_key, p.expires_at
