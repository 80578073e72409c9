-- The expected value of a check: recorded now if this is the first time it is made.
WITH ins AS (
    INSERT INTO drift_baselines (chain_id, subject, check_name, expected)
    VALUES (%(chain_id)s, %(subject)s, %(check_name)s, %(observed)s)
    ON CONFLICT DO NOTHING
    RETURNING expected
)
SELECT expected FROM ins
UNION ALL
SELECT expected FROM drift_baselines
WHERE chain_id = %(chain_id)s AND subject = %(subject)s AND check_name = %(check_name)s
LIMIT 1
