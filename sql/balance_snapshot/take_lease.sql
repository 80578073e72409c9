-- Take a lease shared by every runtime: at most one holder per period. Returns
-- nothing when another runtime (or an earlier call) holds it, with the time it
-- frees up in `next_at` of the row (see lease_free_at).
UPDATE balance_leases
SET next_at = now() + make_interval(secs => %(seconds)s),
    taken_by = %(taken_by)s,
    updated_at = now()
WHERE lease_name = %(lease_name)s
  AND next_at <= now()
RETURNING next_at
