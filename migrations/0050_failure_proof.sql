-- Issue 43 item 3: an operator cannot make FAILED true by saying so.
--
-- A confirmed FAILED resolution of a node attempt whose signed transactions could still
-- be mined (a reservation of it, reserved or broadcast, with kept bytes) is not applied
-- at once: evm_nonce_reaper replaces those bytes at the same nonce with a zero-value
-- self-transfer (kind 'cancel', a fee bump over the newest kept), and the node reaches
-- FAILED only once the chain shows the cancel consumed the nonce (its receipt at the
-- trusted depth). If the payment consumed it instead, the node is handed back to the
-- observer (paid), never FAILED. Meanwhile the node stays UNKNOWN with error_code
-- FAILURE_NOT_PROVEN, which recovery leaves alone.
--
-- applied_at: when the resolution took effect (NULL: confirmed, waiting for the chain);
-- proof: what the chain showed (or that nothing was ever signed). A row confirmed before
-- this migration was applied without proof: its proof stays NULL.
ALTER TABLE movement_node_resolutions
    ADD COLUMN applied_at timestamptz,
    ADD COLUMN proof jsonb;
UPDATE movement_node_resolutions SET applied_at = decided_at WHERE status = 'confirmed';
CREATE INDEX movement_node_resolutions_awaiting_proof
    ON movement_node_resolutions (id) WHERE status = 'confirmed' AND applied_at IS NULL;

ALTER TABLE evm_signed_transactions DROP CONSTRAINT evm_signed_transactions_kind_check;
ALTER TABLE evm_signed_transactions ADD CONSTRAINT evm_signed_transactions_kind_check
    CHECK (kind IN ('payment', 'replacement', 'gap_fill', 'cancel'));

-- A node attempt's live reservations, by the node id its keys start with (an allowance
-- raise is keyed `<node id>:approve…`).
CREATE INDEX evm_nonce_reservations_owner
    ON evm_nonce_reservations (split_part(request_node_id, ':', 1), attempt_no)
    WHERE state IN ('reserved', 'broadcast');

-- Whether a FAILED node attempt is proven FAILED: nothing it signed can still be mined
-- (no live reservation with kept bytes), and, when operators resolved it FAILED, the
-- resolution carries its proof. The one rule behind retry (409 FAILURE_NOT_PROVEN) and
-- the movement's `failure_proven` (the console offers retry only where it is true).
CREATE FUNCTION qtg_failure_proven(p_node_id uuid, p_attempt_no integer, p_error_code text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM evm_nonce_reservations v
               WHERE split_part(v.request_node_id, ':', 1) = p_node_id::text
                 AND v.attempt_no = p_attempt_no
                 AND v.state IN ('reserved', 'broadcast')
                 AND v.tx_hash IS NOT NULL)
       AND (p_error_code IS DISTINCT FROM 'RESOLVED_FAILED_BY_OPERATORS'
            OR EXISTS (
               SELECT 1 FROM movement_node_resolutions res
               WHERE res.node_id = p_node_id AND res.attempt_no = p_attempt_no
                 AND res.status = 'confirmed' AND res.outcome = 'FAILED'
                 AND res.applied_at IS NOT NULL AND res.proof IS NOT NULL))
$$;
