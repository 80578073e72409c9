-- Issue 44 item 3, the write-ahead transaction after a prepare run with no lock
-- held: each request again, then its leased node — waiting (every holder of a
-- request or a READY node holds it for a few statements), in the order given
-- (the caller sorts by request id, so two dispatchers lock alike). Lock order as
-- everywhere: request, then node. Every node comes back with what decides its
-- fate: the write-ahead goes ahead only if the request is APPROVED (its first
-- write-ahead makes it EXECUTING) or EXECUTING, the node is
-- READY in the attempt it was leased in and `ours` (the lease still holds this
-- pass's token: no later claim took it after an expiry).
--
-- Each row by primary key only, its tests in the select list (issue 29, 44 item 4).
SELECT n.id, n.node_state, n.attempt_no, r.request_state,
       coalesce(n.dispatch_lease = %(lease)s::uuid, false) AS ours
FROM unnest(%(request_ids)s::uuid[], %(node_ids)s::uuid[]) AS w (request_id, node_id)
CROSS JOIN LATERAL (
    SELECT r.id, r.request_state
    FROM movement_requests r
    WHERE r.id = w.request_id
    OFFSET 0
    FOR NO KEY UPDATE
) r
CROSS JOIN LATERAL (
    SELECT n.id, n.node_state, n.attempt_no, n.dispatch_lease
    FROM movement_request_nodes n
    WHERE n.id = w.node_id
    OFFSET 0
    FOR NO KEY UPDATE
) n
