-- One charge per movement, at its first dispatched action node.
INSERT INTO policy_charges (request_id, asset, destination, initiator, amount,
                            policy_version, policy_rule)
VALUES (%(request_id)s, %(asset)s, %(destination)s, %(initiator)s, %(amount)s,
        %(policy_version)s, %(policy_rule)s)
ON CONFLICT (request_id) DO NOTHING
