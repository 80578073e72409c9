-- For this transaction only: a prune batch walks its table's primary key from its
-- cursor and stops at its LIMIT. The planner, on statistics taken when the table was
-- small (autovacuum off, or lagging a burst), otherwise prefers a bitmap scan of the
-- whole id range and a sort, or a scan driven from the other side of a join:
-- linear in the table, on every batch. Turning these off leaves the walk as the
-- cheapest plan on any statistics (they only make the other plans look expensive).
SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true),
       set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true)
