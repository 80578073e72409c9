-- When the expiration checker next has work: the earliest approval deadline.
SELECT min(expires_at) AS due
FROM movement_requests
WHERE request_state = 'PENDING_APPROVAL'
  AND network_class = %(network_class)s
  AND expires_at IS NOT NULL
