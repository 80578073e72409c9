-- One held delivery per (notification, route) the severity routes it to.
INSERT INTO notification_deliveries (notification_id, route)
SELECT * FROM unnest(%(ids)s::bigint[], %(routes)s::text[])
ON CONFLICT DO NOTHING
