UPDATE movement_requests
SET current_frontier = %(frontier)s
WHERE id = %(request_id)s
  AND current_frontier IS DISTINCT FROM %(frontier)s::text[]
