-- The policy version and rule a movement is governed by (at creation, again at
-- each approval: the active version decides).
UPDATE movement_requests
SET policy_version = %(policy_version)s, policy_rule = %(policy_rule)s,
    policy_approvals = %(policy_approvals)s, policy_delay_seconds = %(policy_delay_seconds)s
WHERE id = %(request_id)s
