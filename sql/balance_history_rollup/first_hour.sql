SELECT min(bucket_start) AS first FROM balance_history WHERE bucket = 'hour'
