-- Still undetermined: record why and move to the back of the lane (updated_at).
UPDATE movement_request_nodes
SET error_detail = %(error_detail)s
WHERE id = %(node_id)s
