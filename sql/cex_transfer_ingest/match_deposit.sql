-- The destination observe node waiting for this deposit: a cex_deposit_status
-- node, not yet final, whose own provider_refs carry the txid or whose movement
-- has a completed node that does (the withdrawal or send that made it).
SELECT n.id
FROM movement_request_nodes n
JOIN plan_nodes p ON p.id = n.plan_node_id
WHERE n.action_type = 'cex_deposit_status'
  AND n.node_kind = 'observe'
  AND n.node_state NOT IN ('COMPLETED', 'SKIPPED', 'FAILED')
  AND (p.config ->> 'venue' IS NULL OR p.config ->> 'venue' = %(venue)s)
  AND (n.provider_refs ->> 'txid' = %(txid)s
       OR EXISTS (SELECT 1 FROM movement_request_nodes done
                  WHERE done.request_id = n.request_id
                    AND done.node_state = 'COMPLETED'
                    AND done.provider_refs ->> 'txid' = %(txid)s))
ORDER BY n.created_at
LIMIT 1
