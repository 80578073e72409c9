-- The intent a message id belongs to (ccip_delivery).
SELECT id, state FROM ccip_send_intents WHERE message_id = %(message_id)s
