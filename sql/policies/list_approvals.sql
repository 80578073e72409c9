SELECT principal, principal_role, policy_version, policy_rule, approved_at
FROM movement_approvals WHERE request_id = %(request_id)s ORDER BY approved_at, principal
