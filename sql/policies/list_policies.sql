-- Newest first: the active version and the proposals beside it.
SELECT * FROM policy_versions ORDER BY version DESC LIMIT %(limit)s
