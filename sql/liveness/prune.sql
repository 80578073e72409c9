-- Rows of processes that have not beaten for the retention (they are gone), and
-- own no SUBMITTING node any more.
DELETE FROM runtime_processes p
WHERE p.alive_at < now() - make_interval(secs => %(retention_seconds)s)
  AND NOT EXISTS (
      SELECT 1 FROM movement_request_nodes n
      WHERE n.submitting_owner = p.instance_id AND n.node_state = 'SUBMITTING')
