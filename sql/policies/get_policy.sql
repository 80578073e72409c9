SELECT * FROM policy_versions WHERE version = %(version)s
