-- Issue 44 item 3: the holds of a dispatch lease end with its write-ahead
-- transaction (the charge written, or the attempt discarded). Only this lease's:
-- a hold a later lease of the movement took is that lease's. Expired holds go
-- too (their dispatcher died mid-prepare; they count for nothing already), so
-- the table keeps only the holds of nodes being prepared now: a few rows.
DELETE FROM policy_holds
WHERE (request_id = ANY(%(request_ids)s::uuid[]) AND lease = %(lease)s::uuid)
   OR until <= clock_timestamp()
