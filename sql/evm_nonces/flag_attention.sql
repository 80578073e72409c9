-- A broadcast nonce unmined past MG_EVM_NONCE_ATTENTION_SECONDS: flag it once and put a
-- request_attention event on the movement that owns it, for a person to look at (only
-- while the claimed owner still holds it: issue 44 item 5).
WITH flagged AS (
    UPDATE evm_nonce_reservations SET attention_raised = true
    WHERE id = %(id)s
      AND request_node_id IS NOT DISTINCT FROM %(request_node_id)s
      AND attempt_no IS NOT DISTINCT FROM %(attempt_no)s
    RETURNING request_node_id, chain_id, address, nonce, tx_hash
)
SELECT qtg_record_event(n.request_id, n.id, n.node_key, 'request_attention', NULL, NULL,
           jsonb_build_object('reason', 'evm nonce broadcast but not mined',
                              'chain_id', f.chain_id, 'address', f.address,
                              'nonce', f.nonce, 'tx_hash', f.tx_hash))
FROM flagged f
-- by primary key (issue 44 item 4: comparing n.id::text read the whole node
-- table); a request_node_id that is not a uuid matches nothing, as before
JOIN movement_request_nodes n
  ON n.id = CASE WHEN f.request_node_id ~* '^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$'
                 THEN f.request_node_id::uuid END
