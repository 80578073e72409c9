-- The one-statement pickup (PgQueuer's shape): the claim is the commit. Nothing
-- the client builds from the node can be in it.
UPDATE floor_nodes
SET node_state = 'CLAIMED'
WHERE id = (SELECT id FROM floor_nodes WHERE node_state = 'READY'
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
