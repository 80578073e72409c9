-- The first movement_events id at or after the cut-off (the walk's upper bound,
-- exclusive): events are written in id order, roughly in created_at order, so
-- nothing at or above it is old enough. Walks the primary key from the oldest
-- event once per run; after a first prune that is the short tail of kept events.
SELECT coalesce(
    (SELECT id FROM movement_events
     WHERE created_at >= now() - make_interval(secs => %(older_than_seconds)s)
     ORDER BY id LIMIT 1),
    (SELECT max(id) + 1 FROM movement_events),
    0) AS bound_id
