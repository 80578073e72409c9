-- Every transaction the ledger did not know was adopted as a node's payment (issue 43
-- item 2): the ledger is in step with the chain again and its LEDGER_BEHIND_CHAIN hold
-- on the signer ends, cleared by qtg itself with the evidence; the hold's page is
-- resolved (the adoption raises its own notification, which stays open for a person).
WITH cleared AS (
    UPDATE evm_signer_holds
    SET cleared_at = now(), cleared_by = %(actor)s, clear_evidence = %(evidence)s
    WHERE address = %(address)s AND chain_id = %(chain_id)s
      AND reason = 'LEDGER_BEHIND_CHAIN' AND cleared_at IS NULL
    RETURNING id, chain_id, address, reason
)
SELECT id,
       qtg_resolve_notification(
           'evm_signer_hold:' || chain_id::text || ':' || address || ':' || reason
       ) AS pages_resolved
FROM cleared
