UPDATE cex_transfers SET matched_node_id = %(node_id)s, updated_at = now()
WHERE id = %(id)s AND matched_node_id IS NULL
