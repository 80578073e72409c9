-- Issue 24 item 5: at the start of a dispatch pass, READY nodes whose
-- transient wait is over go back into the claim's walk (the partial index
-- movement_request_nodes_ready_now takes nodes with no dispatch_not_before).
-- Only when a wait may be due, by the dispatcher's last reading of them
-- (qtg/services/known_waits.py): not ahead of every claim.
-- An index walk of movement_request_nodes_dispatch_waiting, stopping at its
-- LIMIT; a row someone holds is left for the next pass. Any network class:
-- clearing a wait is harmless, and a due row left set would keep every
-- dispatcher's next_due in the past. transient_since and transient_tries stay
-- (the backoff and the page go on counting until the write-ahead). A due
-- dispatch lease (issue 44 item 3: its dispatcher died mid-prepare, or overran)
-- is cleared with its token: the node is claimed again under a new one, and the
-- old holder, should it still write, finds the lease lost and discards.
UPDATE movement_request_nodes n
SET dispatch_not_before = NULL,
    dispatch_lease = NULL
WHERE n.id IN (
    SELECT w.id
    FROM movement_request_nodes w
    WHERE w.node_state = 'READY'
      AND w.dispatch_not_before IS NOT NULL
      AND w.dispatch_not_before <= clock_timestamp()
    ORDER BY w.dispatch_not_before
    -- The LIMIT is a sub-select, so a plan is costed alike with or without its
    -- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
    LIMIT (SELECT %(limit)s::integer)
    FOR NO KEY UPDATE SKIP LOCKED
)
RETURNING n.id
