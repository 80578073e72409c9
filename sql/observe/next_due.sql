-- When the observer next has work, so it can sleep exactly until then: the
-- earliest next_observe_at of an observable node of this class that nobody
-- holds. A node without one is due now: now(), never '-infinity' (psycopg
-- cannot load it: "timestamp too small", issue 25 item 4).
--
-- Rows another process holds are skipped (FOR SHARE conflicts with the
-- claims' FOR NO KEY UPDATE of the node or its request): a due node locked
-- through someone's provider call must not make this observer spin at 10 Hz;
-- its holder commits a new next_observe_at, which notifies qtg_observe.
--
-- An index walk that stops at its first row (issue 25 item 7, issue 29):
-- movement_request_nodes_observe_due (coalesce(next_observe_at, '-infinity'),
-- id) in order, each node's request by primary key only (a LATERAL sub-select,
-- its state and class tests wrapped in IS TRUE so no other index serves them;
-- see sql/observe/claim_batch.sql). No sort of every in-flight node.
SELECT coalesce(n.next_observe_at, now()) AS due
FROM movement_request_nodes n
CROSS JOIN LATERAL (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = n.request_id
      AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
WHERE n.node_state IN ('SUBMITTED', 'OBSERVING')
ORDER BY coalesce(n.next_observe_at, '-infinity'::timestamptz), n.id
LIMIT 1
FOR SHARE OF n, r SKIP LOCKED
