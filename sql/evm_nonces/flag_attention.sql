UPDATE evm_nonce_reservations SET attention_raised = true WHERE id = %(id)s
