DELETE FROM audit_outbox
WHERE id = ANY(%(ids)s::bigint[])
