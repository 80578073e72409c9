-- A supervised worker died outside its loop: say so, with the error.
UPDATE worker_heartbeats
SET status = 'crashed',
    instance_id = %(instance_id)s,
    last_beat_at = now(),
    last_error = %(last_error)s,
    updated_at = now()
WHERE network_class = %(network_class)s
  AND worker_name = %(worker_name)s
