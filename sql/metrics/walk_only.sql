-- For the rest of this read-only transaction, the planner may satisfy an
-- ORDER BY ... LIMIT only by walking an index in that order (issue 29): no
-- bitmap scan, no sort, no sequential scan unless nothing else can answer.
-- sql/metrics/observe_lag.sql counts up to thousands of rows in its walk's
-- order; with statistics from before a burst (the table believed empty) the
-- planner prefers reading every due node and sorting them, a cost that grows
-- with the backlog it is there to report. Transaction-local: the metrics
-- read's own transaction, then gone.
SELECT set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true),
       set_config('enable_seqscan', 'off', true)
