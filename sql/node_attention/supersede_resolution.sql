-- A proposal made for an earlier attempt or state episode of the node proves
-- nothing about the current one: closed, never confirmed.
UPDATE movement_node_resolutions
SET status = 'superseded', decided_at = now()
WHERE id = %(id)s AND status = 'proposed'
