SELECT next_at, GREATEST(EXTRACT(EPOCH FROM next_at - now()), 0)::float8 AS wait_seconds
FROM balance_leases
WHERE lease_name = %(lease_name)s
