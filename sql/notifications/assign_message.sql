-- The held deliveries this message carries.
UPDATE notification_deliveries
SET message_id = %(message_id)s
WHERE route = %(route)s
  AND notification_id = ANY(%(ids)s::bigint[])
  AND message_id IS NULL
