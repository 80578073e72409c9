-- qtg-bench: the drain's span by commit times: the first write-ahead claim, the
-- last node completion, and how many nodes completed.
SELECT /* qtg-bench */ min(pg_xact_commit_timestamp(xact_id::xid))
           FILTER (WHERE to_state = 'SUBMITTING') AS first_claim,
       max(pg_xact_commit_timestamp(xact_id::xid))
           FILTER (WHERE to_state = 'COMPLETED') AS last_completion,
       count(*) FILTER (WHERE to_state = 'COMPLETED') AS nodes_completed,
       count(*) FILTER (WHERE to_state = 'SUBMITTING') AS nodes_claimed,
       clock_timestamp() AS now
FROM movement_events
WHERE event_type = 'node_state_changed'
