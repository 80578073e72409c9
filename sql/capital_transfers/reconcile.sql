-- Status taken from the movement, for any transfer the trigger did not keep
-- in step (it normally does, in the movement's own transaction); this
-- runtime's network class only (issue 25).
--
-- Only open transfers (pending, movement_created, needs_attention) are
-- walked: a transfer is linked to its movement only while open
-- (sql/capital_transfers/link_movement.sql), and from then on the trigger
-- (migrations/0011) moves it in every transaction that changes the
-- movement's state. What can slip is the link racing a state change (the
-- link read the state before that change committed, the trigger did not yet
-- see the link): the transfer then stays open with an older status. So a
-- completed or failed transfer needs no walk, and the pass no longer walks
-- every transfer ever made (issue 25 item 7): an index walk of the partial
-- index capital_transfer_requests_open (created_at), each movement by
-- primary key only (a LATERAL sub-select, see sql/observe/claim_batch.sql),
-- stopping at its LIMIT.
WITH stale AS (
    SELECT t.id, qtg_capital_transfer_status(r.request_state) AS status
    FROM capital_transfer_requests t
    CROSS JOIN LATERAL (
        SELECT r.request_state FROM movement_requests r WHERE r.id = t.request_id OFFSET 0
    ) r
    WHERE t.status IN ('pending', 'movement_created', 'needs_attention')
      AND t.status <> qtg_capital_transfer_status(r.request_state)
      -- coalesce: estimated at one half, where a plain equality on a column
      -- without statistics is 0.005, which made the planner bitmap-scan every
      -- open transfer and sort them (see sql/recover/list_candidates.sql)
      AND coalesce(t.network_class = %(network_class)s, false)
    ORDER BY t.created_at
    -- The LIMIT is a sub-select, so a plan is costed alike with or without its
    -- value and the connection keeps one (sql/dispatch/claim_batch.sql says why).
    LIMIT (SELECT %(limit)s::integer)
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE capital_transfer_requests AS t
SET status = stale.status, followed_up_at = now()
FROM stale
WHERE t.id = stale.id
