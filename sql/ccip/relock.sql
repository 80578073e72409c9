-- ccip_stranded_reaper's write of one verdict (migrations/0058): the intent and
-- its node locked again, SKIP LOCKED (a node a worker holds now is that worker's;
-- the verdict is dropped, the intent reaped again later), and only while the
-- lease holds this pass's token and the intent is in the state the chain was
-- asked about.
SELECT i.id
FROM ccip_send_intents i
JOIN movement_request_nodes n ON n.id = i.request_node_id
WHERE i.id = %(id)s
  AND i.reap_lease = %(lease)s
  AND i.state = %(state)s
FOR UPDATE OF i SKIP LOCKED
FOR NO KEY UPDATE OF n SKIP LOCKED
