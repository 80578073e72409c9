-- Each request's new state: one row of the arrays per request
-- (qtg.db.deferred). The guard trigger refuses a move the transition table does
-- not allow.
--
-- The requests are reached by their primary key only (tests/test_plans.py): the
-- ids go in as an InitPlan's array, whose length the planner cannot see — with
-- the ids' own array it weighs them against the table's pages and, for a batch
-- of tens, seq-scans movement_requests into a hash join.
UPDATE movement_requests r
SET request_state = s.request_state
FROM unnest(%(request_ids)s::uuid[], %(request_states)s::text[]) AS s(id, request_state)
WHERE r.id = s.id
  AND r.id = ANY(ARRAY(SELECT unnest(%(request_ids)s::uuid[])))
