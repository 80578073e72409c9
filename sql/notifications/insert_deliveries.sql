-- One held delivery per (notification, route) the severity routes it to.
INSERT INTO notification_deliveries (notification_id, route)
SELECT * FROM unnest(%(ids)b::bigint[], %(routes)b::text[])
ON CONFLICT DO NOTHING
