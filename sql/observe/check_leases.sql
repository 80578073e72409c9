-- Issue 25 item 5: of the nodes a claim leased, those whose lease still holds
-- the claim's token, in the attempt that was observed, still SUBMITTED or
-- OBSERVING — locked (after their requests, in id order) for the outcome. A
-- node missing here was claimed again after its lease ran out, or moved on by
-- someone else: what this observer saw is discarded. A row another
-- transaction is writing is waited for, and the test is made on its new
-- version.
SELECT n.id
FROM movement_request_nodes n
JOIN unnest(%(node_ids)s::uuid[], %(attempts)s::int[]) AS leased(id, attempt_no)
  ON leased.id = n.id
WHERE n.observe_lease = %(lease)s
  AND n.attempt_no = leased.attempt_no
  AND n.node_state IN ('SUBMITTED', 'OBSERVING')
ORDER BY n.id
FOR NO KEY UPDATE OF n
