-- Issue 24 item 5: transient is not failure. A node whose preflight or prepare
-- hit a fault that may clear by itself (an RPC outage, a fee above its cap, an
-- open drift finding) stays READY with a next-attempt time instead of FAILED.
--
-- dispatch_not_before: the dispatcher does not claim the node before then.
-- transient_since: when this wait began (the first transient fault since the
--   node last went to SUBMITTING); past MG_NODE_TRANSIENT_ATTENTION_SECONDS the
--   node pages (sql/node_attention/raise_attention.sql).
-- transient_tries: how many transient faults in a row; the backoff doubles with
--   it up to MG_NODE_TRANSIENT_RETRY_MAX_SECONDS (qtg.domain.faults).
-- The write-ahead step clears all three.
ALTER TABLE movement_request_nodes
    ADD COLUMN dispatch_not_before timestamptz,
    ADD COLUMN transient_since timestamptz,
    ADD COLUMN transient_tries integer NOT NULL DEFAULT 0;

-- The dispatch claim walks READY nodes that may run now (sql/dispatch/claim_batch.sql,
-- list_candidates.sql): a waiting node is not in this index, so a thousand nodes
-- waiting out an RPC outage cost the walk nothing. It is the 0021 walk's order
-- (request_created_at, request_id, id), with the wait in the predicate. The
-- manual test is spelled IS DISTINCT FROM (node_kind is NOT NULL: the same rows)
-- so that the claims, which spell it so, can be served by this index only, never
-- by 0021's movement_request_nodes_ready_heads (which holds the waiting nodes
-- too): on the statistics of an empty table the planner took either.
CREATE INDEX movement_request_nodes_ready_now
    ON movement_request_nodes (request_created_at, request_id, id)
    WHERE node_state = 'READY' AND node_kind IS DISTINCT FROM 'manual'
      AND dispatch_not_before IS NULL;

-- The waiting ones, by due time: each dispatch pass first clears the wait of the
-- due ones (sql/dispatch/release_due.sql) and the dispatcher sleeps until the
-- earliest (sql/dispatch/next_due.sql).
CREATE INDEX movement_request_nodes_dispatch_waiting
    ON movement_request_nodes (dispatch_not_before)
    WHERE node_state = 'READY' AND dispatch_not_before IS NOT NULL;
