-- What the signing path compares before any signature (qtg/services/custody.py):
-- the movement's approval seal and the signer's enrolled identity, in one round
-- trip. The request row is already locked by the dispatcher's claim.
SELECT (SELECT r.approval_seal FROM movement_requests r WHERE r.id = %(request_id)s)
           AS approval_seal,
       (SELECT s.expected_signer_address FROM signers s WHERE s.signer_key = %(signer_key)s)
           AS expected_signer_address
