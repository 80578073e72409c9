-- Serialise reservations of one (chain, address) across every runtime, for this transaction.
SELECT pg_advisory_xact_lock(hashtextextended(%(chain_id)s::text || ':' || %(address)s, 0))
