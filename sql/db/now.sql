-- The database's clock (the one every expires_at and next_*_at is compared with).
SELECT now() AS now
