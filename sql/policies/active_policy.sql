-- The one ACTIVE policy version (a unique partial index allows no second), or none.
SELECT version, document FROM policy_versions WHERE state = 'ACTIVE'
