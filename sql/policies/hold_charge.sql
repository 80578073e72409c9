-- Issue 44 item 3: hold a movement's charge while its node is prepared with no
-- lock held (migrations/0081), until its dispatch lease expires. Under the
-- ledger's lock, in the claim's transaction. A hold left by an earlier lease of
-- the same movement (expired, or never dropped) is replaced.
INSERT INTO policy_holds (request_id, lease, asset, destination, initiator, amount, until)
VALUES (%(request_id)s, %(lease)s, %(asset)s, %(destination)s, %(initiator)s, %(amount)s,
        clock_timestamp() + make_interval(secs => %(lease_seconds)s))
ON CONFLICT (request_id) DO UPDATE
SET lease = excluded.lease, asset = excluded.asset, destination = excluded.destination,
    initiator = excluded.initiator, amount = excluded.amount, until = excluded.until
