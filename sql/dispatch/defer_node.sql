-- Issue 24 item 5: a transient fault before any side effect (RetryLater from
-- preflight, prepare or signing): the claimed node stays READY and is not
-- claimed again before %(wait_seconds)s from now. The fault is on the node for
-- the operator (error_code, error_detail) and the wait's start and length are
-- kept for the backoff and the page. The caller holds the node.
UPDATE movement_request_nodes
SET dispatch_not_before = clock_timestamp() + make_interval(secs => %(wait_seconds)s),
    transient_since = coalesce(transient_since, clock_timestamp()),
    transient_tries = transient_tries + 1,
    error_code = %(error_code)s,
    error_detail = %(error_detail)s,
    dispatch_lease = NULL  -- the wait replaces a dispatch lease (issue 44 item 3)
WHERE id = %(node_id)s
  AND node_state = 'READY'
RETURNING transient_tries, dispatch_not_before
