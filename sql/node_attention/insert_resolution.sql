INSERT INTO movement_node_resolutions
    (request_id, node_id, node_key, attempt_no, node_state, outcome, evidence, provider_refs,
     proposed_by)
VALUES (%(request_id)s, %(node_id)s, %(node_key)s, %(attempt_no)s, %(node_state)s, %(outcome)s,
        %(evidence)s, %(provider_refs)s, %(actor)s)
RETURNING *
