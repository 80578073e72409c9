-- Issue 44 item 4: sql/cex_transfer_ingest/match_deposit.sql had no index path
-- at all: every ingested deposit read the whole node table (a seq scan that
-- grows with the history, whatever the statistics say). The open deposit
-- observe nodes, in the order the statement takes them; the predicate's
-- columns are already in other indexes' predicates (node_state) or never
-- written after insert (action_type, node_kind), so no update loses HOT.
CREATE INDEX movement_request_nodes_cex_deposit_waiting
    ON movement_request_nodes (created_at)
    WHERE action_type = 'cex_deposit_status' AND node_kind = 'observe'
      AND node_state NOT IN ('COMPLETED', 'SKIPPED', 'FAILED');
