-- Each request's current frontier: one row of the arrays per request
-- (qtg.db.deferred), the frontier as a JSON array of node keys (an array of
-- arrays must be rectangular). Unchanged frontiers are not written (no
-- frontier_advanced event). The requests by their primary key only, as in
-- sql/progress/set_request_state.sql (why the InitPlan).
UPDATE movement_requests r
SET current_frontier = f.frontier
FROM (SELECT u.id,
             ARRAY(SELECT k.node_key
                   FROM jsonb_array_elements_text(u.frontier) WITH ORDINALITY AS k(node_key, i)
                   ORDER BY k.i) AS frontier
      FROM unnest(%(request_ids)s::uuid[], %(frontiers)s::jsonb[]) AS u(id, frontier)) f
WHERE r.id = f.id
  AND r.id = ANY(ARRAY(SELECT unnest(%(request_ids)s::uuid[])))
  AND r.current_frontier IS DISTINCT FROM f.frontier
