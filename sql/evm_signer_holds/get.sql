SELECT id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
       last_seen_at, cleared_at, cleared_by, clear_evidence
FROM evm_signer_holds WHERE id = %(id)s
