-- The only statement that writes expected_signer_address
-- (PUT /v3/signers/{signer_key}/expected-identity).
UPDATE signers
SET expected_signer_address = %(address)s,
    expected_set_by = %(actor)s,
    expected_set_at = now()
WHERE signer_key = %(key)s
