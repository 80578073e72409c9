SELECT signer_key, health_state, health_detail, last_health_at, registered,
       observed_signer_address, observed_at,
       expected_signer_address, expected_set_by, expected_set_at, updated_at
FROM signers
ORDER BY signer_key
