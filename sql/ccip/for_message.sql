-- The intent a message id belongs to (ccip_delivery without the send's intent id).
-- Chainlink Local repeats ids for equal messages: the newest one.
SELECT id, state FROM ccip_send_intents WHERE message_id = %(message_id)s ORDER BY id DESC LIMIT 1
