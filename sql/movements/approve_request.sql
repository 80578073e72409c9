-- Approval: the request's state and its first frontier in ONE row version
-- (issue 29: one UPDATE of the request per approval, not two). The frontier is
-- the roots the approval makes READY (sql/movements/release_roots.sql, sent
-- after this), as qtg.domain.execution.frontier_keys derives it; its
-- frontier_advanced event follows request_state_changed, from this statement.
-- approval_seal (issue 45): what the signer will compare the movement with.
UPDATE movement_requests
SET request_state = 'APPROVED', approved_by = %(actor)s, decided_by = %(actor)s,
    current_frontier = %(frontier)s::text[], approval_seal = %(approval_seal)s
WHERE id = %(request_id)s
