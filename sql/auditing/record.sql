-- One audit_outbox row, in the caller's transaction (the promoter copies it into audit_events).
INSERT INTO audit_outbox (actor, action, object_type, object_id, detail)
VALUES (%(actor)s, %(action)s, %(object_type)s, %(object_id)s, %(detail)s)
