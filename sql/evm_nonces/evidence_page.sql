-- A nonce consumed at the trusted depth has had no readable evidence (neither our
-- receipt nor the consuming transaction) for MG_EVM_EVIDENCE_ATTENTION_SECONDS: page
-- critical, once per nonce (resolved by clear_not_landed when the evidence comes).
SELECT qtg_raise_notification(
    'evm_evidence_missing', 'critical',
    'evm_evidence:' || %(chain_id)s::text || ':' || %(address)s || ':' || %(nonce)s::text,
    'chain ' || %(chain_id)s::text || ': what consumed nonce ' || %(nonce)s::text || ' of '
        || %(address)s || ' cannot be read',
    %(body)s,
    jsonb_build_object('chain_id', %(chain_id)s::bigint, 'address', %(address)s::text,
                       'nonce', %(nonce)s::bigint, 'hashes', %(hashes)s::jsonb)
)
