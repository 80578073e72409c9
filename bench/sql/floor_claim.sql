-- The write-ahead pickup's first round trip (after BEGIN, in its pipeline): the
-- node locked, with the parameters the client builds the prepared action from.
SELECT id, params
FROM floor_nodes
WHERE node_state = 'READY'
ORDER BY id
LIMIT 1
FOR NO KEY UPDATE SKIP LOCKED
