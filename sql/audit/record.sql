-- An audit fact, written in the transaction of the change it describes; the
-- audit_outbox_promoter moves it into the hash-chained audit_events.
INSERT INTO audit_outbox (actor, action, object_type, object_id, detail)
VALUES (%(actor)s, %(action)s, %(object_type)s, %(object_id)s, %(detail)s)
RETURNING id
