-- Reference §2, phase 1: a snapshot of due candidates, oldest request first,
-- for the per-node claims (sql/observe/claim_node.sql) that follow.
--
-- Rows another process holds are left out here (FOR SHARE ... SKIP LOCKED;
-- run on its own, the statement's locks end with it): otherwise nodes held
-- through someone's provider call fill the page, every claim misses, and a
-- due node behind them is never reached while the loop goes round (issue 25
-- item 4: 22 passes in 3 s at a 60 s interval).
--
-- The walk of sql/observe/claim_batch.sql (movement_request_nodes_observable_fifo,
-- the due test on the index entry, the request by primary key only), so it
-- stops at its LIMIT whatever the statistics say.
SELECT n.id
FROM movement_request_nodes n
CROSS JOIN LATERAL (
    SELECT r.id
    FROM movement_requests r
    WHERE r.id = n.request_id
      AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
    OFFSET 0
) r
WHERE n.node_state IN ('SUBMITTED', 'OBSERVING')
  AND coalesce(n.next_observe_at, '-infinity'::timestamptz) <= now()
ORDER BY n.request_created_at, coalesce(n.next_observe_at, '-infinity'::timestamptz), n.id
-- The LIMIT is a sub-select, so a plan is costed alike with or without its
-- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
LIMIT (SELECT %(limit)s::integer)
FOR SHARE OF n, r SKIP LOCKED
