-- The version being replaced by an approval; its row is held by the same transaction.
UPDATE policy_versions SET state = 'SUPERSEDED'
WHERE state = 'ACTIVE'
RETURNING version
