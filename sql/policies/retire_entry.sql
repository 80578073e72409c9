-- An entry replaced by an approved change.
UPDATE address_book_entries SET state = 'REMOVED'
WHERE id = %(entry_id)s AND state = 'ACTIVE'
RETURNING id
