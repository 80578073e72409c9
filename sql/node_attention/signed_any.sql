-- Whether a node attempt kept signed bytes for any reservation not released (a released
-- one was never broadcast, or refused by every URL): with none, nothing it signed was ever
-- on a chain, which proves an operators' FAILED; with consumed ones only, a chain
-- transaction of it may have been mined, and operators saying FAILED proves nothing.
SELECT EXISTS (
    SELECT 1 FROM evm_nonce_reservations
    WHERE split_part(request_node_id, ':', 1) = %(node_id)s::text
      AND attempt_no = %(attempt_no)s
      AND state <> 'released'
      AND tx_hash IS NOT NULL
)
