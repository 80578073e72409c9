-- qtg-bench: the start gate. Held while the runtimes start, it blocks every
-- claim (FOR UPDATE, UPDATE) on nodes but no plain read, so all runtimes begin
-- draining at the same moment, when the benchmark commits.
LOCK TABLE movement_request_nodes IN EXCLUSIVE MODE
