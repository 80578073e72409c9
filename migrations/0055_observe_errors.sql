-- Issue 44 item 2: an observation that keeps failing is recorded on its node and
-- pages after a bound, instead of reading as "still pending" for ever.
--
-- observe_errors: observations in a row that raised, timed out or could not be
-- asked (the executor gone, a $ref unresolved); 0 after any answer. It spaces
-- the next observation out (doubling, capped: sql/observe/record_pending_batch.sql),
-- so a failing node does not come back first at every pass.
-- observe_failing_since: when the current run of failures began (NULL: the last
-- observation answered). Past MG_NODE_UNKNOWN_ATTENTION_SECONDS the attention
-- sweep pages it (sql/node_attention/raise_observe_failing.sql) and the
-- sibling guard of sql/node_attention/raise_attention.sql no longer counts
-- the node as "money in flight being watched".
-- observe_paged_at: when that page was raised (NULL: no open page); the sweep
-- resolves the page once the node answers again or leaves observation.
--
-- Nullable or with a constant default: adding them rewrites no row.
ALTER TABLE movement_request_nodes
    ADD COLUMN observe_errors integer NOT NULL DEFAULT 0,
    ADD COLUMN observe_failing_since timestamptz,
    ADD COLUMN observe_paged_at timestamptz;

-- The sweep's walks: only failing or paged nodes are in it (few).
CREATE INDEX movement_request_nodes_observe_failing
    ON movement_request_nodes (observe_failing_since, id)
    WHERE observe_failing_since IS NOT NULL OR observe_paged_at IS NOT NULL;
