-- GET /v3/drift: open findings first, newest first.
SELECT id, chain_id, subject, check_name, expected, observed, evidence, found_at, cleared_at
FROM drift_findings
WHERE (%(open_only)s::boolean IS FALSE OR cleared_at IS NULL)
ORDER BY cleared_at IS NOT NULL, found_at DESC, id DESC
LIMIT %(limit)s
