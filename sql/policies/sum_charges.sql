-- What an accumulation rule has already let out in its window and scope: the
-- charges of movements dispatched under a policy (sql/policies/insert_charge.sql),
-- of the rule's assets when it names some. A null filter is no filter.
SELECT coalesce(sum(amount), 0) AS used
FROM policy_charges
WHERE charged_at > clock_timestamp() - make_interval(secs => %(window_seconds)s)
  AND (%(assets)s::text[] IS NULL OR asset = ANY(%(assets)s::text[]))
  AND (%(destination)s::text IS NULL OR destination = %(destination)s)
  AND (%(asset)s::text IS NULL OR asset = %(asset)s)
  AND (%(initiator)s::text IS NULL OR initiator = %(initiator)s)
