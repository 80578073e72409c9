-- ccip_stranded_reaper's lease (migrations/0058), in the claim's transaction (which
-- holds these rows: no wait). The guard trigger moves updated_at: the intents are
-- not claimable again until the threshold has passed anew, nor before reap_until
-- (migrations/0059), whatever the threshold.
UPDATE ccip_send_intents
SET reap_lease = %(lease)s,
    reap_until = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(%(ids)s::bigint[])
