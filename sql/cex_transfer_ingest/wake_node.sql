-- Observe this node now: moving next_observe_at earlier fires qtg_observe
-- (migration 0002), so the observer asks the executor at once.
UPDATE movement_request_nodes
SET next_observe_at = now()
WHERE id = %(node_id)s
  AND node_state IN ('SUBMITTED', 'OBSERVING')
  AND (next_observe_at IS NULL OR next_observe_at > now())
