-- Issue 29: one index of movement_request_nodes by request, not two.
--
-- movement_request_nodes_request (request_id) has been redundant since the
-- table was created: the unique movement_request_nodes_request_id_node_key_key
-- (request_id, node_key) leads with the same column and serves every lookup
-- by request (a request's nodes, the sibling tests, the foreign key's checks)
-- as well. Yet a node's row version that cannot be HOT — every write of
-- next_observe_at or node_state, both indexed — inserted an entry into both:
-- one of the five index inserts of each observation write of an in-flight node.
DROP INDEX movement_request_nodes_request;
