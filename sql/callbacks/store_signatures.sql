-- Store the v3 signature of claimed rows that have none yet, in the claim's
-- transaction, before their first attempt is sent: every retry resends it.
-- A row that already has one keeps it (signed once, never re-signed).
UPDATE movement_callback_outbox AS o
SET callback_signature = s.signature
FROM unnest(%(ids)s::bigint[], %(signatures)s::text[]) AS s (id, signature)
WHERE o.id = s.id
  AND o.callback_signature IS NULL
