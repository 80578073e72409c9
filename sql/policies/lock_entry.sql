SELECT * FROM address_book_entries WHERE id = %(entry_id)s FOR UPDATE
