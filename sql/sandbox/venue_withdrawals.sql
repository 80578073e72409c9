-- The sandbox venue's withdrawal history: its cex_withdrawal submissions (each
-- processed by the venue when it was made), as an exchange would list them.
SELECT provider_refs ->> 'withdrawal_id' AS external_id,
       provider_refs ->> 'txid' AS txid,
       artifacts ->> 'amount' AS amount,
       COALESCE(artifacts ->> 'asset', 'USDC') AS asset,
       created_at AS occurred_at
FROM sandbox_submissions
WHERE action_type = 'cex_withdrawal'
  AND provider_refs ? 'withdrawal_id'
  AND artifacts ? 'amount'
  AND created_at >= %(since)s
ORDER BY created_at
