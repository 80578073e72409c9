-- Approve (ACTIVE from usable_at) or reject a PROPOSED entry.
UPDATE address_book_entries
SET state = %(state)s, decided_by = %(actor)s, decided_at = clock_timestamp(),
    usable_at = CASE WHEN %(state)s = 'ACTIVE'
                     THEN coalesce(%(usable_at)s::timestamptz,
                                   clock_timestamp() + make_interval(secs => %(cooling_off_seconds)s))
                END
WHERE id = %(entry_id)s AND state = 'PROPOSED'
RETURNING *, greatest(0, extract(epoch FROM usable_at - clock_timestamp()))::float8
    AS cooling_off_left_seconds
