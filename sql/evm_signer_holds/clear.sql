-- A person clears an active hold (the signer's lanes sign again); resolves its page.
-- No row: no such hold, or it was already cleared.
WITH cleared AS (
    UPDATE evm_signer_holds
    SET cleared_at = now(), cleared_by = %(actor)s, clear_evidence = %(evidence)s
    WHERE id = %(id)s AND cleared_at IS NULL
    RETURNING id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
              last_seen_at, cleared_at, cleared_by, clear_evidence
)
SELECT cleared.*,
       qtg_resolve_notification(
           'evm_signer_hold:' || coalesce(cleared.chain_id::text, '*') || ':' || cleared.address
               || ':' || cleared.reason
       ) AS pages_resolved
FROM cleared
