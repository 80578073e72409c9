-- One observation of each observe-only node named (the remote system's "status"
-- endpoint, asked for a batch at once: qtg/providers/coalesce.py): its counter,
-- made on the first. Sorted, so two batches lock shared rows in one order.
INSERT INTO sandbox_observations AS o (request_node_id, observe_count)
SELECT node_id, 1 FROM unnest(%(request_node_ids)s::text[]) AS node_id ORDER BY node_id
ON CONFLICT (request_node_id) DO UPDATE
    SET observe_count = o.observe_count + 1,
        updated_at = now()
RETURNING o.request_node_id, o.observe_count
