-- Hold the node while submit runs, so recovery (which skips locked rows) can
-- never recover an attempt whose submit is still in flight. No row: someone
-- else moved the node since the write-ahead commit, and we must not submit.
SELECT id
FROM movement_request_nodes
WHERE id = %(node_id)s
  AND node_state = 'SUBMITTING'
  AND attempt_no = %(attempt_no)s
FOR NO KEY UPDATE
