-- The node attempt a reorged reservation (consumed, now above the chain's count) belongs
-- to, as it stands: a COMPLETED payment whose transaction left the canonical chain is an
-- event and a page (issue 43 item 5). An allowance raise's key is `<node id>:approve…`.
SELECT n.request_id, n.id AS node_id, n.node_key, n.node_state
FROM movement_request_nodes n
WHERE n.id = CASE WHEN split_part(%(request_node_id)s, ':', 1)
                       ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                  THEN split_part(%(request_node_id)s, ':', 1)::uuid END
  AND n.attempt_no IS NOT DISTINCT FROM %(attempt_no)s
