-- When the proposal expiration worker next has work: the earliest review deadline.
SELECT min(expires_at) AS due
FROM template_proposals
WHERE proposal_state = 'PENDING_REVIEW'
  AND expires_at IS NOT NULL
