-- A proposed policy version (issue 45): PROPOSED until another admin decides.
INSERT INTO policy_versions (document, document_hash, proposed_by, note)
VALUES (%(document)s, %(document_hash)s, %(actor)s, %(note)s)
RETURNING *
