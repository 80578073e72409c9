-- A confirmed FAILED resolution still waiting for the chain's proof, locked for applying
-- the chain's verdict (one runtime at a time; SKIP LOCKED: another is on it).
SELECT res.id, res.request_id, res.node_id, res.node_key, res.attempt_no, res.proposed_by,
       res.confirmed_by, res.evidence
FROM movement_node_resolutions res
WHERE res.id = %(id)s AND res.status = 'confirmed' AND res.outcome = 'FAILED'
  AND res.applied_at IS NULL
FOR UPDATE SKIP LOCKED
