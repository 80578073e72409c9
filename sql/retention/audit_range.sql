-- What an audit archive run takes: rows after the newest anchor, up to (not
-- including) the first row that is not old enough, and never the chain's head
-- (the promoter chains the next row to it). Rows are archived in chain (id)
-- order, so one young row keeps every row after it.
WITH head AS (
    SELECT max(id) AS id FROM audit_events
), first_young AS (
    SELECT id FROM audit_events
    WHERE id > %(after_id)s
      AND occurred_at >= now() - make_interval(secs => %(older_than_seconds)s)
    ORDER BY id
    LIMIT 1
)
SELECT max(e.id) AS up_to_id, count(*) AS n
FROM audit_events e
WHERE e.id > %(after_id)s
  AND e.id < (SELECT id FROM head)
  AND e.id < coalesce((SELECT id FROM first_young), (SELECT id FROM head))
