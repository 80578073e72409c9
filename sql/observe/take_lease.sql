-- Issue 25 item 5: the claim's lease, written in the claim's transaction (which
-- holds these rows, so it waits for nobody). next_observe_at moves past the
-- observation, so the nodes are not due for any other observer while this one
-- asks the provider with no lock held; moving it later fires no qtg_observe.
--
-- node_ids NULL: the nodes the batch claim of this transaction recorded in
-- qtg.claimed_nodes (sql/observe/claim_batch.sql), so that the lease and the
-- COMMIT travel in the claim's own pipeline: the claim transaction is one round
-- trip (issue 29; observe.observe_batch).
UPDATE movement_request_nodes
SET observe_lease = %(lease)s,
    next_observe_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(coalesce(%(node_ids)s::uuid[],
                        nullif(current_setting('qtg.claimed_nodes', true), '')::uuid[]))
