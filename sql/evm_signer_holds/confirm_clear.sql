-- The second operator's half: a different principal confirms the open proposal, the hold
-- ends (both names and both evidences kept) and its page is resolved. No row: no such
-- active hold with a proposal by someone else.
WITH cleared AS (
    UPDATE evm_signer_holds
    SET cleared_at = now(), cleared_by = %(actor)s,
        clear_evidence = clear_proposed_evidence || ' (proposed by ' || clear_proposed_by
                         || '); confirmed: ' || %(evidence)s
    WHERE id = %(id)s AND cleared_at IS NULL
      AND clear_proposed_by IS NOT NULL AND clear_proposed_by <> %(actor)s
    RETURNING id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
              last_seen_at, cleared_at, cleared_by, clear_evidence, clear_proposed_by,
              clear_proposed_at, clear_proposed_evidence
)
SELECT cleared.*,
       qtg_resolve_notification(
           'evm_signer_hold:' || coalesce(cleared.chain_id::text, '*') || ':' || cleared.address
               || ':' || cleared.reason
       ) AS pages_resolved
FROM cleared
