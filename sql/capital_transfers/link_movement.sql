-- The transfer's movement exists: link it once and take its status from it
-- (qtg_capital_transfer_status is the one mapping, migrations/0011).
UPDATE capital_transfer_requests AS t
SET request_id = r.id,
    status = qtg_capital_transfer_status(r.request_state),
    last_error = NULL,
    followed_up_at = now()
FROM movement_requests AS r
WHERE t.id = %(id)s
  AND r.id = %(request_id)s
  AND t.request_id IS NULL
RETURNING t.id
