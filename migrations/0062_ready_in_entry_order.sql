-- Issue 44 item 5: claims in time order. The dispatch claims took "the oldest
-- READY node" of a request as the first by id (sql/dispatch/claim_batch.sql,
-- list_candidates.sql): a random UUID (gen_random_uuid), so which of a
-- request's ready nodes went first was chance. They now take the one that
-- became READY first (state_entered_at, set by migration 0016's trigger at
-- each state change; NULL only on rows older than that migration, taken
-- first), id breaking ties. The walk index carries that order after the
-- request, so each request's head is still one index probe. state_entered_at
-- was already written only with node_state, which this index's predicate
-- reads, so no write that was HOT stops being so.
DROP INDEX movement_request_nodes_ready_now;
CREATE INDEX movement_request_nodes_ready_now
    ON movement_request_nodes (request_created_at, request_id, state_entered_at NULLS FIRST, id)
    WHERE node_state = 'READY' AND node_kind IS DISTINCT FROM 'manual'
      AND dispatch_not_before IS NULL;
