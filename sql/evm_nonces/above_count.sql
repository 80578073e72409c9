-- One account's reservations at or above the chain's transaction count, lowest first, under
-- the account lock: what a reconcile pass may rebroadcast, reopen or gap-fill. `mine`: the
-- row is of this runtime's network class (issue 44 item 5), as in claim_stale.sql — the
-- class of the movement whose node holds it (a key `<node id>:approve…` is that node's);
-- a row naming no node (a gap fill) is every class's. A pass acts only on its own rows,
-- but sees them all: a hole below another class's live nonce is still a hole.
SELECT res.id, res.nonce, res.state, res.tx_hash, res.request_node_id, res.attempt_no,
       res.updated_at < now() - make_interval(secs => %(stale_seconds)s) AS stale,
       res.updated_at < %(pass_started)s AS before_pass,
       coalesce(r.network_class, %(network_class)s) = %(network_class)s AS mine,
       -- its node attempt is FAILED, or resolved FAILED and waiting for the chain, or no
       -- longer the node's attempt (it was retried): its payment bytes are never sent
       -- again (issue 43 item 3) — beside a newer attempt they could pay twice — only a
       -- cancel of its nonce
       (n.attempt_no IS DISTINCT FROM res.attempt_no
        OR n.node_state = 'FAILED'
        OR EXISTS (SELECT 1 FROM movement_node_resolutions m
                   WHERE m.node_id = n.id AND m.attempt_no = res.attempt_no
                     AND m.status = 'confirmed' AND m.outcome = 'FAILED'
                     AND m.applied_at IS NULL)) IS TRUE AND n.id IS NOT NULL AS cancelling
FROM evm_nonce_reservations res
LEFT JOIN movement_request_nodes n
       ON n.id = CASE WHEN split_part(res.request_node_id, ':', 1)
                           ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                      THEN split_part(res.request_node_id, ':', 1)::uuid END
LEFT JOIN movement_requests r ON r.id = n.request_id
WHERE res.chain_id = %(chain_id)s AND res.address = %(address)s AND res.nonce >= %(floor)s
ORDER BY res.nonce
