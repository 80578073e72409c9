-- Place a hold on a signer (idempotent: an active hold for the same chain, signer and
-- reason only counts the occurrence) and page critical in the same statement's
-- transaction; returns the hold and whether this call created it.
WITH placed AS (
    INSERT INTO evm_signer_holds (chain_id, address, reason, evidence, created_by)
    VALUES (%(chain_id)s, lower(%(address)s), %(reason)s, %(evidence)s, %(actor)s)
    ON CONFLICT (coalesce(chain_id, 0), address, reason) WHERE cleared_at IS NULL DO UPDATE
        SET occurrences = evm_signer_holds.occurrences + 1, last_seen_at = now()
    RETURNING id, chain_id, address, reason, evidence, created_by, created_at, occurrences,
              (xmax = 0) AS created
)
SELECT placed.*,
       qtg_raise_notification(
           'evm_signer_hold', 'critical',
           'evm_signer_hold:' || coalesce(placed.chain_id::text, '*') || ':' || placed.address
               || ':' || placed.reason,
           'signer ' || placed.address || ' held on '
               || coalesce('chain ' || placed.chain_id::text, 'every chain') || ': '
               || placed.reason,
           %(body)s,
           jsonb_build_object('hold_id', placed.id, 'evidence', placed.evidence)
       ) AS notification_id
FROM placed
