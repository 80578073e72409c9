-- The tokens movement templates pay with (issue 43: drift watching on by default for
-- every configured token): evm nodes name their chain and token; ccip nodes their lane
-- (the caller maps it to its chain) and token / fee token.
SELECT DISTINCT 'evm' AS kind, config->'evm'->>'chain_id' AS chain, lower(config->'evm'->>'token') AS address
FROM plan_nodes
WHERE jsonb_typeof(config->'evm') = 'object' AND config->'evm'->>'token' ~* '^0x[0-9a-f]{40}$'
  AND config->'evm'->>'chain_id' ~ '^[0-9]+$'
UNION
SELECT DISTINCT 'ccip', config->'ccip'->>'lane', lower(token)
FROM plan_nodes,
     LATERAL (VALUES (config->'ccip'->>'token'), (config->'ccip'->>'fee_token')) AS t(token)
WHERE jsonb_typeof(config->'ccip') = 'object' AND token ~* '^0x[0-9a-f]{40}$'
