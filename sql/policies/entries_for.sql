-- The active entries of one destination address (case-insensitive: EVM
-- addresses are hex), usable or still cooling off.
SELECT label, chain, asset, address, tags, usable_at,
       usable_at <= clock_timestamp() AS usable
FROM address_book_entries
WHERE state = 'ACTIVE' AND lower(address) = lower(%(address)s)
