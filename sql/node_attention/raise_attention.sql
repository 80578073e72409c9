-- Issue 25 item 1: nodes that recovery has not decided for
-- MG_NODE_UNKNOWN_ATTENTION_SECONDS — UNKNOWN that long, or SUBMITTING that long
-- past the SUBMITTING grace — put their movement in front of a person, once per
-- node attempt and EXECUTING episode (movement_node_attention): a node paged before
-- an operator resumed the movement (or resolved a sibling) pages again once the
-- request has been back in EXECUTING for the same bound (migration 0026). Moving the request EXECUTING →
-- MANUAL_INTERVENTION is the existing attention path: the request trigger writes
-- the request_attention event (and its callback), whose trigger raises the
-- critical notification.
--
-- Only the request row is locked, and SKIP LOCKED: a request a worker holds is
-- taken by a later pass. The node row is never locked (a hung submit holds it);
-- the marker's INSERT needs only the foreign key's KEY SHARE on it.
-- Only EXECUTING requests of this network class: the others are not running.
-- Not while another node of the request is in flight (derive.py's guard).
--
-- A walk of movement_request_nodes_undecided (0026) in entry order from the
-- oldest, stopping at its LIMIT; each node's request by primary key only (a
-- LATERAL sub-select, see sql/observe/claim_batch.sql) that also holds the
-- page-once and in-flight tests, wrapped in coalesce(…, false) so they are
-- checked per node rather than planned as joins, and so only a request that
-- will be paged is locked (not every request the walk passes). Run
-- after every node_recovery pass, it walked every EXECUTING request and
-- bitmap-scanned the nodes of each on stale statistics (1.2 s on 10k requests).
WITH due AS (
    SELECT n.id AS node_id, n.attempt_no, n.request_id, n.node_key, n.node_state,
           extract(epoch FROM now() - coalesce(n.state_entered_at, n.updated_at))
               AS undecided_seconds
    FROM movement_request_nodes n
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = n.request_id
          AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
          AND coalesce(
              NOT EXISTS (
                  SELECT 1 FROM movement_node_attention a
                  WHERE a.node_id = n.id AND a.attempt_no = n.attempt_no
                    AND (a.raised_at >= coalesce(r.state_entered_at, r.updated_at)
                         OR coalesce(r.state_entered_at, r.updated_at)
                            >= now() - make_interval(secs => %(attention_seconds)s)))
              -- money in flight on another branch is never abandoned (the observer and
              -- recovery work only on EXECUTING requests): wait until it settles. The
              -- test wrapped in IS TRUE: only the request_id index reaches the siblings.
              -- A sibling whose observations have failed for the bound is not being
              -- watched (issue 44 item 2: it pages itself, raise_observe_failing.sql):
              -- it must not silence this node.
              AND NOT EXISTS (
                  SELECT 1 FROM movement_request_nodes o
                  WHERE o.request_id = n.request_id
                    AND (o.id <> n.id
                         AND ((o.node_state IN ('SUBMITTED', 'OBSERVING')
                               AND NOT coalesce(o.observe_failing_since < now() - make_interval(
                                       secs => %(attention_seconds)s), false))
                              OR (o.node_state = 'SUBMITTING'
                                  AND coalesce(o.state_entered_at, o.updated_at)
                                      >= now() - make_interval(
                                             secs => %(grace_seconds)s + %(attention_seconds)s))))
                        IS TRUE),
              false)
        OFFSET 0
    ) r
    WHERE n.node_state IN ('UNKNOWN', 'SUBMITTING')
      AND coalesce(n.state_entered_at, n.updated_at)
          < now() - make_interval(secs => %(attention_seconds)s)
      AND (n.node_state = 'UNKNOWN'
           OR coalesce(n.state_entered_at, n.updated_at) < now() - make_interval(
                  secs => %(grace_seconds)s + %(attention_seconds)s)) IS TRUE
    ORDER BY coalesce(n.state_entered_at, n.updated_at)
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF r SKIP LOCKED
), marked AS (
    INSERT INTO movement_node_attention
        (node_id, attempt_no, request_id, node_key, node_state, undecided_seconds)
    SELECT node_id, attempt_no, request_id, node_key, node_state, undecided_seconds FROM due
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
