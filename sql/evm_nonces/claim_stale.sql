-- evm_nonce_reaper: open reservations untouched for the threshold, one runtime each.
-- Only reservations of this runtime's network class (issue 25): the class of the
-- movement whose node reserved the nonce (request_node_id is that node's id as
-- text, or `<node id>:approve…` for its allowance raises; the CASE keeps a value that
-- is not a uuid from failing the cast). A
-- reservation that names no node (qtg's executors always name one) belongs to
-- no class and is reaped by whichever runtime gets to it: the verdict is the
-- chain's alone, and nothing is written on a movement for it.
--
-- Not a reservation whose node attempt is SUBMITTING (issue 24 item 8): its
-- write-ahead committed and its submit may be about to run (a lane waiting
-- behind slow predecessors); releasing it under that submit would fail a node
-- that sent nothing. The submit keeps its bytes or the node is recovered, and
-- recover() releases an attempt that never signed (NOTHING_SIGNED).
SELECT res.id, res.chain_id, res.address, res.nonce, res.state, res.tx_hash,
       res.request_node_id, res.attempt_no, res.attention_raised,
       now() - res.updated_at > make_interval(secs => %(attention_seconds)s) AS past_attention
FROM evm_nonce_reservations res
LEFT JOIN movement_request_nodes n
       ON n.id = CASE WHEN split_part(res.request_node_id, ':', 1)
                           ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                      THEN split_part(res.request_node_id, ':', 1)::uuid END
LEFT JOIN movement_requests r ON r.id = n.request_id
WHERE res.state IN ('reserved', 'broadcast')
  AND res.updated_at < now() - make_interval(secs => %(stale_seconds)s)
  AND coalesce(r.network_class, %(network_class)s) = %(network_class)s
  AND NOT (res.state = 'reserved' AND n.node_state IS NOT DISTINCT FROM 'SUBMITTING'
           AND n.attempt_no IS NOT DISTINCT FROM res.attempt_no)
ORDER BY res.updated_at
LIMIT %(limit)s
FOR UPDATE OF res SKIP LOCKED
