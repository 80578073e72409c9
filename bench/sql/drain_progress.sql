-- qtg-bench: how far a drain is. `stuck` counts movements that will not complete
-- by themselves; the node counts show where the backlog waits (READY: for the
-- dispatcher; SUBMITTED/OBSERVING: for the observer).
SELECT /* qtg-bench */
       (SELECT count(*) FILTER (WHERE request_state = 'COMPLETED') FROM movement_requests)
           AS completed,
       (SELECT count(*) FILTER (WHERE request_state IN ('FAILED', 'MANUAL_INTERVENTION',
                                                        'WAITING_MANUAL_ACTION', 'CANCELLED'))
        FROM movement_requests) AS stuck,
       (SELECT count(*) FROM movement_requests) AS total,
       count(*) FILTER (WHERE node_state = 'READY') AS ready,
       count(*) FILTER (WHERE node_state = 'SUBMITTING') AS submitting,
       count(*) FILTER (WHERE node_state IN ('SUBMITTED', 'OBSERVING')) AS observing
FROM movement_request_nodes
