-- How far behind the observer is, for the metrics endpoint (issue 29): the
-- observable nodes of this network class whose observation has been due for
-- more than %(overdue_seconds)s (counted up to %(cap)s, so a scrape's cost is
-- bounded however far behind it is), and how long the longest-due one has
-- waited (0 when none is due). A node never observed (next_observe_at NULL)
-- has been due since it entered its state (updated_at for rows from before
-- migration 0016 recorded that). The walk takes those first: were there more
-- than %(cap)s of them, older due times behind them would go uncounted — the
-- gauge then still says "at least %(cap)s".
--
-- The same walk as the observer's own due-time query (sql/observe/next_due.sql):
-- movement_request_nodes_observe_due (coalesce(next_observe_at, '-infinity'),
-- id) in order, each node's request by primary key only (a LATERAL sub-select
-- whose state and class tests are wrapped in IS TRUE, so no other index can
-- serve them and stale statistics cannot turn the walk into a scan of every
-- EXECUTING request). The cap counts the nodes that pass the join: due nodes
-- of another class or of a request not EXECUTING are walked over, as by the
-- observer's own due-time query. Plain reads, no locks: a node an observer
-- holds while it observes has its lease's due time, in the future.
WITH due AS (
    SELECT coalesce(n.next_observe_at, n.state_entered_at, n.updated_at) AS due_at
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
    ORDER BY coalesce(n.next_observe_at, '-infinity'::timestamptz), n.id
    LIMIT %(cap)s
)
SELECT count(*) FILTER (
           WHERE due_at < now() - make_interval(secs => %(overdue_seconds)s)
       )::bigint AS overdue,
       coalesce(extract(epoch FROM now() - min(due_at)), 0)::float8 AS lag_seconds
FROM due
