-- The first operator's half of a four-eyes clear: kept on the active hold, nothing
-- cleared yet. No row: no such active hold, or a proposal is already open.
UPDATE evm_signer_holds
SET clear_proposed_by = %(actor)s, clear_proposed_at = now(),
    clear_proposed_evidence = %(evidence)s
WHERE id = %(id)s AND cleared_at IS NULL AND clear_proposed_by IS NULL
RETURNING id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
          last_seen_at, cleared_at, cleared_by, clear_evidence, clear_proposed_by,
          clear_proposed_at, clear_proposed_evidence
