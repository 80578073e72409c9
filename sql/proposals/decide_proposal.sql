-- APPROVED or REJECTED by a reviewer; only a PENDING_REVIEW proposal changes.
UPDATE template_proposals
SET proposal_state = %(proposal_state)s,
    reviewed_by = %(actor)s,
    review_note = %(note)s,
    template_version_id = %(template_version_id)s
WHERE id = %(proposal_id)s
  AND proposal_state = 'PENDING_REVIEW'
RETURNING *
