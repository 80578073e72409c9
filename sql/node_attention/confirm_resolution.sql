-- A second principal confirms (the table's CHECK refuses the proposer).
UPDATE movement_node_resolutions
SET status = 'confirmed', confirmed_by = %(actor)s, confirm_evidence = %(evidence)s,
    decided_at = now()
WHERE id = %(id)s AND status = 'proposed'
RETURNING *
