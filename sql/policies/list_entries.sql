-- The book: active entries and open proposals, with the cooling-off time left.
SELECT e.*,
       greatest(0, extract(epoch FROM e.usable_at - clock_timestamp()))::float8
           AS cooling_off_left_seconds
FROM address_book_entries e
WHERE (%(state)s::text IS NULL AND e.state IN ('ACTIVE', 'PROPOSED')) OR e.state = %(state)s
ORDER BY e.proposed_at DESC, e.id
LIMIT %(limit)s
