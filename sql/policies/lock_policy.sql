-- A policy version, held for its decision.
SELECT * FROM policy_versions WHERE version = %(version)s FOR UPDATE
