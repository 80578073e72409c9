-- Store one reported transfer. A repeat changes nothing (the WHERE of DO UPDATE
-- lets through only a pending -> final move or a txid learnt late), and the
-- status never moves back: a final row keeps its status whatever is reported
-- (the trigger of migration 0012 refuses it too). Returns a row only when
-- something was inserted or changed.
INSERT INTO cex_transfers AS t (
    venue, external_id, kind, status, asset, amount, fee, txid, address, network, occurred_at
) VALUES (
    %(venue)s, %(external_id)s, %(kind)s, %(status)s, %(asset)s, %(amount)s, %(fee)s,
    %(txid)s, %(address)s, %(network)s, %(occurred_at)s
)
ON CONFLICT (venue, external_id) DO UPDATE
SET status = CASE WHEN t.status = 'pending' THEN EXCLUDED.status ELSE t.status END,
    txid = COALESCE(t.txid, EXCLUDED.txid),
    fee = COALESCE(t.fee, EXCLUDED.fee),
    updated_at = now()
WHERE (t.status = 'pending' AND EXCLUDED.status <> 'pending')
   OR (t.txid IS NULL AND EXCLUDED.txid IS NOT NULL)
RETURNING t.id, t.kind, t.status, t.txid, t.external_id, t.matched_node_id
