-- The active holds on one signer on one chain (its own, and those on every chain):
-- the check before a new signature.
SELECT id, chain_id, address, reason, evidence, created_by, created_at, occurrences
FROM evm_signer_holds
WHERE address = lower(%(address)s) AND cleared_at IS NULL
  AND (chain_id IS NULL OR chain_id = %(chain_id)s)
ORDER BY id
