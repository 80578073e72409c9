-- Issue 44 item 3: the holds of a dispatch lease end with its write-ahead
-- transaction (the charge written, or the attempt discarded). Only this lease's:
-- a hold a later lease of the movement took is that lease's.
DELETE FROM policy_holds
WHERE request_id = ANY(%(request_ids)s::uuid[]) AND lease = %(lease)s::uuid
