SELECT n.id, n.request_id
FROM movement_request_nodes n
JOIN movement_requests r ON r.id = n.request_id
WHERE n.id = %(node_id)s
  AND r.request_state = 'EXECUTING'
  AND ((n.node_state = 'UNKNOWN' AND n.error_code IS DISTINCT FROM 'OBSERVATION_TIMEOUT')
       OR (n.node_state = 'SUBMITTING'
           AND n.updated_at < now() - make_interval(secs => %(grace_seconds)s)))
FOR UPDATE OF n, r SKIP LOCKED
