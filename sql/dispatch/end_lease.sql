-- Issue 44 item 3: a lease this pass still holds on a node it will not write
-- ahead (its request moved on: cancelled, paged) ends now, not at its expiry:
-- the node is claimable again as soon as its request is. The caller holds the
-- nodes; a node whose lease a later claim took is left alone.
UPDATE movement_request_nodes n
SET dispatch_lease = NULL,
    dispatch_not_before = NULL
FROM unnest(%(node_ids)s::uuid[]) AS l (node_id)
WHERE n.id = l.node_id
  AND (n.node_state = 'READY' AND n.dispatch_lease = %(lease)s::uuid) IS TRUE
