SELECT signer_key, expected_signer_address
FROM signers
WHERE signer_key = %(key)s
FOR UPDATE
