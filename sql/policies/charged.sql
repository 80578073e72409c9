SELECT amount, policy_version, policy_rule, charged_at
FROM policy_charges WHERE request_id = %(request_id)s
