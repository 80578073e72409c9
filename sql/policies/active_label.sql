-- The ACTIVE entry holding a label, if any (labels are unique among active entries).
SELECT id FROM address_book_entries WHERE state = 'ACTIVE' AND label = %(label)s
