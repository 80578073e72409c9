-- A supervised worker of this process died outside its loop: say so on this
-- process's row, with the error (other processes' rows are theirs).
UPDATE worker_heartbeats
SET status = 'crashed',
    last_beat_at = now(),
    last_error = %(last_error)s,
    updated_at = now()
WHERE network_class = %(network_class)s
  AND worker_name = %(worker_name)s
  AND instance_id = %(instance_id)s
