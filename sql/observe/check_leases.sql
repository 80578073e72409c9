-- Issue 25 item 5: of the nodes a claim leased, those whose lease still holds
-- the claim's token, in the attempt that was observed, still SUBMITTED or
-- OBSERVING — locked (after their requests, in id order) for the outcome. A
-- node missing here was claimed again after its lease ran out, or moved on by
-- someone else: what this observer saw is discarded. A row another
-- transaction is writing is waited for, and the test is made on its new
-- version.
--
-- One primary-key probe per leased id is the only plan (issue 29): the ids are
-- sorted first, and each node is a LATERAL sub-select (OFFSET 0 keeps the
-- planner from flattening it) whose one indexable condition is its primary
-- key — its lease, attempt and state tests are wrapped in IS TRUE so no
-- partial index of the node table can serve them. Joined the plain way, with
-- statistics from before a burst, the planner bitmap-scanned the whole
-- observable index (every in-flight node) and joined the ids to it: 1.7 ms
-- for a batch of 64 on 10k in flight, growing with the backlog. The lock is
-- taken inside the sub-select (FOR ... OF n applies there), so the rows are
-- locked in the order the sorted ids are walked: id order, as before.
SELECT n.id
FROM (SELECT leased.id, leased.attempt_no
      FROM unnest(%(node_ids)s::uuid[], %(attempts)s::int[]) AS leased(id, attempt_no)
      ORDER BY leased.id) AS leased
CROSS JOIN LATERAL (
    SELECT n.id
    FROM movement_request_nodes n
    WHERE n.id = leased.id
      AND (n.observe_lease = %(lease)s
           AND n.attempt_no = leased.attempt_no
           AND n.node_state IN ('SUBMITTED', 'OBSERVING')) IS TRUE
    OFFSET 0
) n
ORDER BY n.id
FOR NO KEY UPDATE OF n
