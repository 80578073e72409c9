-- One hold with its clearing proposal, locked: the four-eyes clear decides from it.
SELECT id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
       last_seen_at, cleared_at, cleared_by, clear_evidence, clear_proposed_by,
       clear_proposed_at, clear_proposed_evidence
FROM evm_signer_holds WHERE id = %(id)s
FOR UPDATE
