-- What is left of a rule's delay before dispatch: the latest wait of the
-- movement's READY nodes that is not a transient fault's (sql/policies/delay_roots.sql)
-- nor a dispatch lease's.
SELECT greatest(0, extract(epoch FROM max(dispatch_not_before) - clock_timestamp()))::float8
    AS seconds
FROM movement_request_nodes
WHERE request_id = %(request_id)s AND node_state = 'READY'
  AND dispatch_not_before IS NOT NULL AND transient_since IS NULL
  AND dispatch_lease IS NULL  -- a dispatch lease is no delay (issue 44 item 3)
