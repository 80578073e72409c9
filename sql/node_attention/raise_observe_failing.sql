-- Issue 44 item 2: a node whose observations have failed in a row (the provider
-- raised, timed out, or could not be asked: observe_failing_since, kept by
-- sql/observe/record_pending_batch.sql) for MG_NODE_UNKNOWN_ATTENTION_SECONDS
-- pages, critical, once per run of failures (observe_paged_at). The movement
-- stays EXECUTING and the node keeps being observed (spaced out): its money
-- may be in flight, and the observer is the one that will see it land. The
-- operator's way out: fix what the error names (the page's body), or resolve
-- the node by hand once it is UNKNOWN; the page resolves itself when the node
-- answers again (sql/node_attention/resolve_observe_failing.sql).
--
-- Only the node row is locked, SKIP LOCKED: a node held by an observer's
-- write is taken by a later pass. A walk of movement_request_nodes_observe_failing
-- (migration 0055: failing or paged nodes only), each node's request by
-- primary key only.
WITH due AS (
    SELECT n.id, n.request_id, n.node_key, n.observe_errors, n.error_detail,
           extract(epoch FROM now() - n.observe_failing_since) AS failing_seconds
    FROM movement_request_nodes n
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM movement_requests r
        WHERE r.id = n.request_id
          AND (r.request_state = 'EXECUTING' AND r.network_class = %(network_class)s) IS TRUE
        OFFSET 0
    ) r
    WHERE n.observe_failing_since < now() - make_interval(secs => %(attention_seconds)s)
      AND (n.observe_paged_at IS NULL
           AND n.node_state IN ('SUBMITTED', 'OBSERVING')) IS TRUE
    ORDER BY n.observe_failing_since, n.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF n SKIP LOCKED
), paged AS (
    UPDATE movement_request_nodes n
    SET observe_paged_at = now()
    FROM due
    WHERE n.id = due.id
    RETURNING n.id
)
SELECT d.request_id, d.node_key, d.failing_seconds, d.observe_errors,
       qtg_raise_notification(
           'observe_failing', 'critical', 'observe_failing:' || d.id,
           'node ' || d.node_key || ' of movement ' || d.request_id
               || ' cannot be observed',
           'Node ' || d.node_key || ' of movement ' || d.request_id || ' has failed '
               || d.observe_errors || ' observations in a row for '
               || round(d.failing_seconds) || ' s; its money may be in flight and is not'
               || ' being watched. Last error: ' || coalesce(d.error_detail, '?'),
           jsonb_build_object('request_id', d.request_id, 'node_key', d.node_key,
                              'node_id', d.id),
           d.request_id, d.node_key) AS notification_id
FROM due d
WHERE d.id IN (SELECT id FROM paged)
