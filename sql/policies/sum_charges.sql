-- What an accumulation rule has already let out in its window and scope: the
-- charges of movements dispatched under a policy (sql/policies/insert_charge.sql),
-- of the rule's assets when it names some — and what live holds keep for
-- movements being prepared now (migrations/0081: the dispatcher decided them, and
-- they may go out at any moment), but the deciding movement's own
-- (%(request_id)s; NULL: a movement not created yet). A null filter is no filter.
SELECT (SELECT coalesce(sum(amount), 0)
        FROM policy_charges
        WHERE charged_at > clock_timestamp() - make_interval(secs => %(window_seconds)s)
          AND (%(assets)s::text[] IS NULL OR asset = ANY(%(assets)s::text[]))
          AND (%(destination)s::text IS NULL OR destination = %(destination)s)
          AND (%(asset)s::text IS NULL OR asset = %(asset)s)
          AND (%(initiator)s::text IS NULL OR initiator = %(initiator)s))
     + (SELECT coalesce(sum(amount), 0)
        FROM policy_holds h
        WHERE until > clock_timestamp()
          AND request_id IS DISTINCT FROM %(request_id)s::uuid
          -- charged already (its hold ends with the same commit): counted above
          AND NOT EXISTS (SELECT 1 FROM policy_charges c WHERE c.request_id = h.request_id)
          AND (%(assets)s::text[] IS NULL OR asset = ANY(%(assets)s::text[]))
          AND (%(destination)s::text IS NULL OR destination = %(destination)s)
          AND (%(asset)s::text IS NULL OR asset = %(asset)s)
          AND (%(initiator)s::text IS NULL OR initiator = %(initiator)s)) AS used
