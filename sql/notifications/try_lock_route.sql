-- Batching a route is one dispatcher at a time (its rate budget is counted
-- and spent under this lock); another runtime skips the route meanwhile.
SELECT pg_try_advisory_xact_lock(7435367, hashtext('qtg.notify.route.' || %(route)s)) AS locked
