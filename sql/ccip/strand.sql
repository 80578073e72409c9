-- The chain cannot tell what became of an aged intent: mark it stranded and put the
-- movement in front of a person (request_attention event, critical notification).
WITH stranded AS (
    UPDATE ccip_send_intents SET state = 'stranded', state_detail = %(detail)s
    WHERE id = %(id)s AND state IN ('pending', 'broadcast', 'sent')
    RETURNING id, request_node_id, chain_id, tx_hash, message_id, lane
), node AS (
    SELECT s.*, n.request_id, n.node_key FROM stranded s
    JOIN movement_request_nodes n ON n.id = s.request_node_id
), event AS (
    SELECT qtg_record_event(request_id, request_node_id, node_key, 'request_attention', NULL,
               NULL, jsonb_build_object('reason', 'ccip send intent stranded',
                                        'detail', %(detail)s, 'intent_id', id, 'lane', lane,
                                        'chain_id', chain_id, 'tx_hash', tx_hash,
                                        'message_id', message_id))
    FROM node
)
SELECT n.id, (SELECT count(*) FROM event) AS events,
       qtg_raise_notification('ccip_stranded', 'critical', 'ccip_stranded:' || n.id,
           'stranded CCIP send on lane ' || n.lane, %(detail)s,
           jsonb_build_object('intent_id', n.id, 'tx_hash', n.tx_hash,
                              'message_id', n.message_id),
           n.request_id, n.node_key) AS notification_id
FROM node n
