-- capital_transfer_followup (§12): pending transfers whose movement is still
-- missing after the grace (the API creates it at once; this is the crash path),
-- oldest first, one runtime each (SKIP LOCKED). The lock is held while the
-- movement is created, and the movement's idempotency key makes it one anyway.
SELECT id, network_class, asset, amount, source, destination, template_key, note, created_by
FROM capital_transfer_requests
WHERE status = 'pending'
  AND request_id IS NULL
  AND created_at < now() - make_interval(secs => %(grace_seconds)s)
ORDER BY created_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
