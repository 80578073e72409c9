-- Messages this route has used in its current rate window.
SELECT count(*) AS used
FROM notification_messages
WHERE route = %(route)s
  AND created_at > now() - make_interval(secs => %(window_seconds)s)
