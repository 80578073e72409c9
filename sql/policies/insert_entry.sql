-- A proposed address-book entry (or a change of the entry it `replaces`).
INSERT INTO address_book_entries (chain, asset, address, label, tags, replaces, proposed_by)
VALUES (%(chain)s, %(asset)s, %(address)s, %(label)s, %(tags)s::text[], %(replaces)s, %(actor)s)
RETURNING *, greatest(0, extract(epoch FROM usable_at - clock_timestamp()))::float8
    AS cooling_off_left_seconds
