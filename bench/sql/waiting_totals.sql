-- qtg-bench: where the waiting nodes are: how many, observations so far, and
-- how many are overdue (due more than a second ago, not under a lease) and by
-- how long the oldest.
SELECT /* qtg-bench */ now() AS db_now,
       count(*) AS observing,
       coalesce(sum(observe_count), 0)::bigint AS observations,
       count(*) FILTER (WHERE observe_lease IS NULL
                          AND next_observe_at < now() - interval '1 second') AS overdue,
       coalesce(extract(epoch FROM now() - min(next_observe_at)
                                FILTER (WHERE observe_lease IS NULL)), 0) AS oldest_due_s,
       count(*) FILTER (WHERE observe_lease IS NULL
                          AND next_observe_at < %(cycle_start)s::timestamptz
                                                + make_interval(secs => %(interval_s)s))
           AS not_cycled
FROM movement_request_nodes
WHERE node_state = 'OBSERVING'
