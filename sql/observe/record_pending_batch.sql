-- "Still in flight: observe again after the interval" (reference "Observation
-- interval control") for every PENDING outcome of one observer batch, in ONE
-- statement (issue 29 item 3): one round trip and one commit per batch, not
-- one UPDATE per node. The lease ends here (observe_lease NULL): moving
-- next_observe_at from the lease's end back to the poll time then wakes no
-- observer (migrations/0022_observe_lease.sql). No movement_events row: an
-- unchanged observation is not an event (the node's observe_count, error_detail
-- and refs say what the last look found).
--
-- It is its own lease check (sql/observe/check_leases.sql's test): a node is
-- written only if its lease still holds this batch's token, in the attempt
-- that was observed, still SUBMITTED or OBSERVING, and its request is still
-- EXECUTING; RETURNING names the nodes written, so the caller knows which
-- observations were discarded.
--
-- Lock order, as everywhere (qtg/services/dispatch.py): the requests first, in
-- id order, waiting for a holder (each holds a request for a few statements),
-- then their nodes. The requests are locked by an InitPlan (ARRAY(...)),
-- which runs once, whole, before the first node row passes the filter — so
-- no node is locked before every request is. When the caller's transaction
-- already holds the requests (the mixed path of qtg/services/observe.py), the
-- lock is taken again at no cost.
--
-- A failed observation (o.failed: it raised, timed out, or could not be asked)
-- is "still pending" too — the side effect may be out there — but it is
-- counted on the node (issue 44 item 2): observe_errors + 1, observe_failing_since
-- kept from the first failure of the run (the attention sweep pages past the
-- bound), and the next observation spaced out, the interval doubled per
-- failure in a row (capped at %(max_backoff)s), so a failing node does not
-- come back at the head of every claim. Any answer ends the run.
--
-- The plan is fixed whatever the statistics (tests/test_plans.py): each
-- request by primary key in sorted id order (the shape and the reason of
-- sql/observe/relock_requests.sql: written as r.id = ANY(ids) AND
-- r.request_state = 'EXECUTING', stale statistics bitmap-scan the state
-- index), then the unnest drives, each node by primary key.
UPDATE movement_request_nodes n
SET node_state = 'OBSERVING',
    observe_count = n.observe_count + 1,
    next_observe_at = now() + make_interval(secs => CASE WHEN o.failed
        THEN least(o.interval_seconds * power(2, least(n.observe_errors, 10)),
                   greatest(o.interval_seconds, %(max_backoff)s::float8))
        ELSE o.interval_seconds END),
    observe_lease = NULL,
    observe_errors = CASE WHEN o.failed THEN n.observe_errors + 1 ELSE 0 END,
    observe_failing_since = CASE WHEN o.failed
        THEN coalesce(n.observe_failing_since, now()) END,
    error_detail = o.error_detail,
    provider_refs = n.provider_refs || o.provider_refs,
    artifacts = n.artifacts || o.artifacts
FROM unnest(%(node_ids)s::uuid[], %(attempts)s::int[], %(intervals)s::float8[],
            %(details)s::text[], %(refs)s::jsonb[], %(artifacts)s::jsonb[],
            %(failed)s::boolean[])
     AS o(id, attempt_no, interval_seconds, error_detail, provider_refs, artifacts, failed)
WHERE n.id = o.id
  -- the node's other tests wrapped in IS TRUE: only its primary key can serve
  -- (else stale statistics AND a bitmap of the request index into it)
  AND (n.observe_lease = %(lease)s
       AND n.attempt_no = o.attempt_no
       AND n.node_state IN ('SUBMITTED', 'OBSERVING')
       AND n.request_id = ANY(ARRAY(
           SELECT r.id
           FROM (SELECT DISTINCT wanted.id
                 FROM unnest(%(request_ids)s::uuid[]) AS wanted(id)
                 ORDER BY wanted.id) AS wanted
           CROSS JOIN LATERAL (
               SELECT r.id
               FROM movement_requests r
               WHERE r.id = wanted.id
                 AND (r.request_state = 'EXECUTING') IS TRUE
               OFFSET 0
           ) r
           ORDER BY r.id
           FOR NO KEY UPDATE OF r
       ))) IS TRUE
RETURNING n.id
