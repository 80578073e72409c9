-- An event on the movement a nonce belongs to (payment_reorged, payment_resend_failed).
SELECT qtg_record_event(%(request_id)s, %(node_id)s, %(node_key)s, %(event_type)s, NULL, NULL,
                        %(payload)s)
