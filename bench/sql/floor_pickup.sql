-- One floor pickup (bench/floor.py): the node's READY commit → the commit that
-- last wrote it (the claim, or the write-ahead), in ms.
SELECT node_state,
       1000 * extract(epoch FROM pg_xact_commit_timestamp(xmin)
                                 - pg_xact_commit_timestamp(ready_xid)) AS ms
FROM floor_nodes
WHERE id = %(id)s
