-- The highest event id handed out so far, committed or not (sequences are not
-- transactional). 0 when no event was ever written.
SELECT coalesce(pg_sequence_last_value('movement_events_id_seq'::regclass), 0) AS last_id
