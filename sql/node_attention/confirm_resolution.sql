-- A second principal confirms (the table's CHECK refuses the proposer). Applied now
-- (applied_at, with its proof), or confirmed only: a FAILED one whose node attempt's
-- signed bytes could still be mined waits for the chain (issue 43 item 3).
UPDATE movement_node_resolutions
SET status = 'confirmed', confirmed_by = %(actor)s, confirm_evidence = %(evidence)s,
    decided_at = now(),
    applied_at = CASE WHEN %(apply)s THEN now() END,
    proof = %(proof)s
WHERE id = %(id)s AND status = 'proposed'
RETURNING *
