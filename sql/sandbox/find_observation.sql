SELECT observe_count FROM sandbox_observations WHERE request_node_id = %(request_node_id)s
