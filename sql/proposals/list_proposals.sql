-- Newest first, optionally one state only.
SELECT *
FROM template_proposals
WHERE %(state)s::text IS NULL OR proposal_state = %(state)s
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
