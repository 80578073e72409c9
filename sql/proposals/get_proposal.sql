SELECT *
FROM template_proposals
WHERE id = %(proposal_id)s
