-- What the signing path compares before any signature (qtg/services/custody.py):
-- the movement's approval seal and the signer's enrolled identity, in one round
-- trip. Read with no lock held before signing (the dispatcher signs with no
-- transaction open, issue 44 item 3), and again by its write-ahead transaction,
-- which holds the request, on the rows as stored then (`custody.seal_holds`).
SELECT (SELECT r.approval_seal FROM movement_requests r WHERE r.id = %(request_id)s)
           AS approval_seal,
       (SELECT s.expected_signer_address FROM signers s WHERE s.signer_key = %(signer_key)s)
           AS expected_signer_address
