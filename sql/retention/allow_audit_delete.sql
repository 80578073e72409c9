-- For this transaction only: the append-only trigger lets archived rows go.
SELECT set_config('qtg.audit_prune', 'on', true)
