UPDATE policy_versions
SET state = %(state)s, decided_by = %(actor)s, decided_at = clock_timestamp(),
    note = coalesce(%(note)s, note)
WHERE version = %(version)s AND state = 'PROPOSED'
RETURNING *
