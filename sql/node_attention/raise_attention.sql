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
WITH due AS (
    SELECT n.id AS node_id, n.attempt_no, n.request_id, n.node_key, n.node_state,
           extract(epoch FROM now() - coalesce(n.state_entered_at, n.updated_at))
               AS undecided_seconds
    FROM movement_request_nodes n
    JOIN movement_requests r ON r.id = n.request_id
    WHERE n.node_state IN ('UNKNOWN', 'SUBMITTING')
      AND coalesce(n.state_entered_at, n.updated_at) < now() - make_interval(
              secs => CASE WHEN n.node_state = 'SUBMITTING'
                           THEN %(grace_seconds)s + %(attention_seconds)s
                           ELSE %(attention_seconds)s END)
      AND r.request_state = 'EXECUTING'
      AND r.network_class = %(network_class)s
      AND NOT EXISTS (
          SELECT 1 FROM movement_node_attention a
          WHERE a.node_id = n.id AND a.attempt_no = n.attempt_no
            AND (a.raised_at >= coalesce(r.state_entered_at, r.updated_at)
                 OR coalesce(r.state_entered_at, r.updated_at)
                    >= now() - make_interval(secs => %(attention_seconds)s)))
      -- money in flight on another branch is never abandoned (the observer and
      -- recovery work only on EXECUTING requests): wait until it settles
      AND NOT EXISTS (
          SELECT 1 FROM movement_request_nodes o
          WHERE o.request_id = n.request_id AND o.id <> n.id
            AND (o.node_state IN ('SUBMITTED', 'OBSERVING')
                 OR (o.node_state = 'SUBMITTING'
                     AND coalesce(o.state_entered_at, o.updated_at) >= now() - make_interval(
                             secs => %(grace_seconds)s + %(attention_seconds)s))))
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
    WHERE r.id IN (SELECT request_id FROM marked)
      AND r.request_state = 'EXECUTING'
    RETURNING r.id
)
SELECT m.request_id, m.node_key, m.node_state, m.undecided_seconds,
       m.request_id IN (SELECT id FROM moved) AS moved
FROM marked m
