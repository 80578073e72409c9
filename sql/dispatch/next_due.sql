-- When the dispatcher next has a waiting node to take (issue 24 item 5): the
-- earliest dispatch_not_before of a READY node nobody holds (a held one is
-- being claimed or released right now). An index walk of
-- movement_request_nodes_dispatch_waiting that stops at its first row. NULL:
-- nothing waits; new READY nodes wake the dispatcher through qtg_dispatch.
SELECT n.dispatch_not_before AS due
FROM movement_request_nodes n
WHERE n.node_state = 'READY' AND n.dispatch_not_before IS NOT NULL
ORDER BY n.dispatch_not_before
LIMIT 1
FOR SHARE OF n SKIP LOCKED
