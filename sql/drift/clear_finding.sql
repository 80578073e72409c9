-- The chain matches its baseline again: close the open finding, if any.
UPDATE drift_findings SET cleared_at = now()
WHERE chain_id = %(chain_id)s AND subject = %(subject)s AND check_name = %(check_name)s
  AND cleared_at IS NULL
RETURNING id
