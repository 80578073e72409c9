-- Move an intent on, only from the states given (a concurrent writer that moved it
-- first wins; the trigger refuses a transition the table does not list). Returns the
-- id when this call moved it.
UPDATE ccip_send_intents SET
    state        = %(state)s,
    message_id   = coalesce(%(message_id)s, message_id),
    block_number = coalesce(%(block_number)s, block_number),
    dest_tx_hash = coalesce(%(dest_tx_hash)s, dest_tx_hash),
    state_detail = coalesce(%(state_detail)s, state_detail)
WHERE id = %(id)s AND state = ANY(%(from_states)s::text[])
RETURNING id
