-- Issue 44 item 2: recovering this node failed in qtg itself (its outcome could
-- not be written: a value the database refuses, a rule that raised), after the
-- claim's transaction rolled back. Recorded on the node as an undecided
-- recover() is (sql/recover/touch_node.sql): why, counted, asked again only
-- after the longest backoff, and to the back of its lane (updated_at moves) —
-- so the other nodes of the pass, and its sweeps, go on, and the node pages
-- past MG_NODE_UNKNOWN_ATTENTION_SECONDS like any undecided one. Only while
-- it is still undecided: another process may have settled it since.
UPDATE movement_request_nodes
SET error_detail = %(error_detail)s,
    recover_attempts = recover_attempts + 1,
    next_recover_at = now() + make_interval(secs => %(delay_seconds)s)
WHERE id = %(node_id)s
  AND node_state IN ('UNKNOWN', 'SUBMITTING')
