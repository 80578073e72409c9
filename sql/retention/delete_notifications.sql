-- One bounded batch of notifications that are over: resolved for the retention
-- period and with no delivery left (a held or unsent one keeps it). An open
-- notification (resolved_at IS NULL) is a condition that still holds: never. Only
-- routed ones: the dispatcher routes and inserts the deliveries in one transaction,
-- so a routed notification's deliveries are visible here (an unrouted one would get
-- them after this check).
WITH doomed AS (
    SELECT n.id
    FROM notifications n
    WHERE n.id > %(after_id)s
      AND n.routed_at IS NOT NULL
      AND n.resolved_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND NOT EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.notification_id = n.id)
    ORDER BY n.id
    LIMIT %(batch_size)s
    FOR UPDATE OF n SKIP LOCKED
), deleted AS (
    DELETE FROM notifications n USING doomed WHERE n.id = doomed.id RETURNING n.id
)
SELECT count(*) AS deleted, coalesce(max(id), 0) AS last_id FROM deleted
