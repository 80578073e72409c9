-- The node an operator resolves, locked NOWAIT: a worker holding it (a submit in
-- flight, an observation, recovery asking the provider) makes this fail at once
-- with lock_not_available, a 409 NODE_BUSY — the API never waits behind a
-- provider call, and never writes over a worker's outcome. past_grace: a
-- SUBMITTING node is resolvable only once recovery itself could take it.
SELECT n.id, n.node_state, n.attempt_no, n.error_code,
       coalesce(n.state_entered_at, n.updated_at) AS state_entered_at,
       coalesce(n.state_entered_at, n.updated_at)
           < now() - make_interval(secs => %(grace_seconds)s) AS past_grace
FROM movement_request_nodes n
WHERE n.id = %(node_id)s
FOR NO KEY UPDATE NOWAIT
