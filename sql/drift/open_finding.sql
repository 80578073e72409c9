-- A drift: opened once, kept open while it lasts. Returns the id only when new.
INSERT INTO drift_findings (chain_id, subject, check_name, expected, observed, evidence)
VALUES (%(chain_id)s, %(subject)s, %(check_name)s, %(expected)s, %(observed)s, %(evidence)s)
ON CONFLICT (chain_id, subject, check_name) WHERE cleared_at IS NULL DO NOTHING
RETURNING id
