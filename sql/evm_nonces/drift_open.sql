-- Open verify_drift findings on a contract (issue 24): a transfer through it is held
-- (RetryLater EVM_DRIFT_HOLD), not failed, until they clear.
SELECT check_name, expected, observed FROM drift_findings
WHERE chain_id = %(chain_id)s AND lower(subject) = lower(%(subject)s) AND cleared_at IS NULL
ORDER BY id
