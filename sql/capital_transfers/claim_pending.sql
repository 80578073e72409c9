-- capital_transfer_followup (§12): pending transfers whose movement is still
-- missing after the grace (the API creates it at once; this is the crash path),
-- oldest first, one runtime each (SKIP LOCKED). The lock is held while the
-- movement is created, and the movement's idempotency key makes it one anyway.
-- Only this runtime's network class (issue 25): the movement is created in the
-- transfer's class, by a runtime of that class.
SELECT id, network_class, asset, amount, source, destination, template_key, note, created_by
FROM capital_transfer_requests
WHERE status = 'pending'
  AND network_class = %(network_class)s
  AND request_id IS NULL
  AND created_at < now() - make_interval(secs => %(grace_seconds)s)
ORDER BY created_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
