SELECT version, document FROM policy_versions WHERE version = %(version)s
