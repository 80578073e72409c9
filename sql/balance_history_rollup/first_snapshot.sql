SELECT min(observed_at) AS first FROM balance_snapshots
