-- Holds, newest first: the active ones only, or all (with their clearing).
SELECT id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
       last_seen_at, cleared_at, cleared_by, clear_evidence, clear_proposed_by,
       clear_proposed_at, clear_proposed_evidence
FROM evm_signer_holds
WHERE (NOT %(active_only)s OR cleared_at IS NULL)
  AND (%(address)s::text IS NULL OR address = lower(%(address)s::text))
ORDER BY id DESC
LIMIT %(limit)s
