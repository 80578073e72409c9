INSERT INTO sandbox_observations AS o (request_node_id, observe_count)
VALUES (%(request_node_id)s, 1)
ON CONFLICT (request_node_id) DO UPDATE
    SET observe_count = o.observe_count + 1,
        updated_at = now()
RETURNING o.observe_count
