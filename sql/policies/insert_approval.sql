-- One principal's approval of a policy-governed movement; a second from the
-- same principal inserts nothing.
INSERT INTO movement_approvals (request_id, principal, principal_role, policy_version, policy_rule)
VALUES (%(request_id)s, %(principal)s, %(principal_role)s, %(policy_version)s, %(policy_rule)s)
ON CONFLICT (request_id, principal) DO NOTHING
RETURNING principal
