-- qtg-bench: the sandbox's side effects: rows, distinct nodes, repeated submits.
SELECT /* qtg-bench */ count(*) AS submissions,
       count(DISTINCT request_node_id) AS nodes,
       coalesce(sum(duplicate_submits), 0) AS duplicates
FROM sandbox_submissions
