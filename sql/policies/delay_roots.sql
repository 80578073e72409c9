-- A rule's delay before dispatch: the roots an approval made READY are not
-- claimed before it (release_due puts them back into the claim's walk then).
-- No transient fault: nothing pages for a delay the policy asked for.
UPDATE movement_request_nodes
SET dispatch_not_before = clock_timestamp() + make_interval(secs => %(delay_seconds)s)
WHERE request_id = %(request_id)s AND node_state = 'READY'
