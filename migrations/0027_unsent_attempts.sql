-- Issue 24 item 5: transient is not failure — also for the attempt budget.
-- An attempt that was written ahead and then given back untouched (the rest of a
-- nonce lane after a refused or ambiguous submit, or a submit that answered
-- RetryLater before any side effect: sql/dispatch/back_to_ready.sql) still takes
-- an attempt number (its idempotency key is spent), but it is no attempt at the
-- money. Counted here, so that MG_NODE_MAX_ATTEMPTS counts only attempts that may
-- have reached the provider: under a storm of RPC faults the soak saw sends end
-- FAILED (nothing moved) after lane stops had used the budget up.
ALTER TABLE movement_request_nodes
    ADD COLUMN unsent_attempts integer NOT NULL DEFAULT 0;
