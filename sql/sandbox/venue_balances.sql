-- What the sandbox venue reports as its balances, with the time it answered.
SELECT account, asset, amount, now() AS observed_at
FROM sandbox_venue_balances
ORDER BY account, asset
