-- When the dispatcher next has a waiting node to take (issue 24 item 5): the
-- earliest dispatch_not_before of a READY node nobody holds (a held one is
-- being claimed or released right now). An index walk of
-- movement_request_nodes_dispatch_waiting that stops at its first row. No row:
-- nothing waits; new READY nodes wake the dispatcher through qtg_dispatch.
--
-- seconds_left: the same due time as seconds from now by this server's clock,
-- which the dispatcher keeps on its own monotonic clock
-- (qtg/services/known_waits.py: a host clock behind the database's must not
-- hold a due wait back).
SELECT n.dispatch_not_before AS due,
       extract(epoch FROM n.dispatch_not_before - clock_timestamp())::float8 AS seconds_left
FROM movement_request_nodes n
WHERE n.node_state = 'READY' AND n.dispatch_not_before IS NOT NULL
ORDER BY n.dispatch_not_before
LIMIT 1
FOR SHARE OF n SKIP LOCKED
