INSERT INTO notification_messages
    (route, kind, notification_count, severity, subject, body, payload, max_attempts)
VALUES (%(route)s, %(kind)s, %(notification_count)s, %(severity)s, %(subject)s, %(body)s,
        %(payload)s, %(max_attempts)s)
RETURNING id
