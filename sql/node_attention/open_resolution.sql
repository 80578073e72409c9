-- The node's open proposal, if any (at most one: movement_node_resolutions_open).
SELECT * FROM movement_node_resolutions
WHERE node_id = %(node_id)s AND status = 'proposed'
