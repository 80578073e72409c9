-- The evm_transfer nodes that may have paid on one chain (issue 43 item 2): not
-- COMPLETED or SKIPPED, not adopted yet, with what their transfer is (intent, plan
-- config) and when their movement was created (a payment cannot precede it). Those
-- not in flight come first: a node the ledger still sees in flight has its own nonce.
SELECT n.id::text AS request_node_id, r.intent, p.config AS node_config,
       extract(epoch FROM r.created_at)::float8 AS created_at,
       n.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING') AS in_flight
FROM movement_request_nodes n
JOIN plan_nodes p ON p.id = n.plan_node_id
JOIN movement_requests r ON r.id = n.request_id
WHERE n.action_type = 'evm_transfer'
  AND n.node_state NOT IN ('COMPLETED', 'SKIPPED')
  AND p.config -> 'evm' ->> 'chain_id' = %(chain_id)s::text
  AND NOT EXISTS (SELECT 1 FROM evm_ledger_adoptions a
                  WHERE a.request_node_id = n.id::text AND a.disposition = 'adopted')
ORDER BY in_flight, r.created_at, n.id
