-- Issue 24 item 5: a READY node waiting out transient faults (an RPC outage, a
-- fee above its cap: dispatch_not_before set) for MG_NODE_TRANSIENT_ATTENTION_SECONDS
-- since its first such fault (transient_since) puts its movement in front of a
-- person, as an undecided node does (sql/node_attention/raise_attention.sql):
-- EXECUTING → MANUAL_INTERVENTION, the request_attention event, its callback and
-- the critical notification. Nothing was sent: the operator cancels, or resumes
-- (the retries go on). Marked under the attempt it is waiting to make
-- (attempt_no + 1), once per EXECUTING episode: after a resume it pages again
-- once the request has been EXECUTING for the bound and the node still waits.
--
-- A walk of movement_request_nodes_dispatch_waiting (migration 0019: only
-- waiting READY nodes, few), each node's request by primary key only (a LATERAL
-- sub-select holding the page-once and in-flight tests, wrapped in
-- coalesce(…, false)), locking only a request that will be paged, SKIP LOCKED.
WITH waiting AS (
    SELECT n.id AS node_id, n.attempt_no + 1 AS attempt_no, n.request_id, n.node_key,
           n.node_state,
           extract(epoch FROM now() - n.transient_since) AS undecided_seconds
    FROM movement_request_nodes n
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = n.request_id
          AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
          AND coalesce(
              NOT EXISTS (
                  SELECT 1 FROM movement_node_attention a
                  WHERE a.node_id = n.id AND a.attempt_no = n.attempt_no + 1
                    AND (a.raised_at >= coalesce(r.state_entered_at, r.updated_at)
                         OR coalesce(r.state_entered_at, r.updated_at)
                            >= now() - make_interval(secs => %(transient_attention_seconds)s)))
              -- money in flight on another branch: that branch's own rules page it
              AND NOT EXISTS (
                  SELECT 1 FROM movement_request_nodes o
                  WHERE o.request_id = n.request_id
                    AND (o.id <> n.id
                         AND o.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING')) IS TRUE),
              false)
        OFFSET 0
    ) r
    WHERE n.node_state = 'READY'
      AND n.dispatch_not_before IS NOT NULL
      AND (n.transient_since
           < now() - make_interval(secs => %(transient_attention_seconds)s)) IS TRUE
    ORDER BY n.dispatch_not_before
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF r SKIP LOCKED
), marked AS (
    INSERT INTO movement_node_attention
        (node_id, attempt_no, request_id, node_key, node_state, undecided_seconds)
    SELECT node_id, attempt_no, request_id, node_key, node_state, undecided_seconds
    FROM waiting
    ON CONFLICT (node_id, attempt_no) DO UPDATE
        SET raised_at = now(), node_state = EXCLUDED.node_state,
            undecided_seconds = EXCLUDED.undecided_seconds
    RETURNING request_id, node_key, node_state, undecided_seconds
), moved AS (
    UPDATE movement_requests r
    SET request_state = 'MANUAL_INTERVENTION'
    WHERE r.id = ANY(ARRAY(SELECT request_id FROM marked))  -- by primary key only
      AND (r.request_state = 'EXECUTING') IS TRUE
    RETURNING r.id
)
SELECT m.request_id, m.node_key, m.node_state, m.undecided_seconds,
       m.request_id IN (SELECT id FROM moved) AS moved
FROM marked m
