-- The write-ahead pickup's second round trip (with its COMMIT): what will be
-- submitted, recorded before it is (DESIGN §4).
UPDATE floor_nodes
SET node_state = 'SUBMITTING',
    idempotency_key = %(idempotency_key)s,
    prepared_action = %(prepared_action)s
WHERE id = %(id)s
