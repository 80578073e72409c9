-- qtg-bench: true once no node of the movement is READY any more (the dispatcher took it).
SELECT /* qtg-bench */ bool_and(node_state <> 'READY') AS picked
FROM movement_request_nodes
WHERE request_id = %(id)s
