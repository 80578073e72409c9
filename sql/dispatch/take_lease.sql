-- Issue 44 item 3: the dispatch lease, in the claim's transaction (which holds the
-- rows: no wait). The node stays READY; dispatch_not_before past the prepare's
-- cut-off takes it out of every claim walk (they skip a node with one) until the
-- write-ahead clears it, or until it is due — the lease expired (the runtime died
-- mid-prepare) — and sql/dispatch/release_due.sql clears it for a new claim.
-- transient_since and transient_tries are untouched: a lease is no fault.
--
-- The state test is wrapped in IS TRUE (issue 29): the ids' primary key is then
-- the only index that serves it (sql/dispatch/write_ahead.sql says why).
UPDATE movement_request_nodes n
SET dispatch_lease = %(lease)s::uuid,
    dispatch_not_before = clock_timestamp() + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(node_ids)s::uuid[]) AS l (node_id)
WHERE n.id = l.node_id
  AND (n.node_state = 'READY') IS TRUE
