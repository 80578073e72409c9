-- The only statement that writes observed_signer_address (besides the orphan
-- sweep, which clears it). It never touches expected_signer_address.
-- observe = false keeps the previous observation (health() absent or failed:
-- no new evidence); observe = true replaces it with %(observed)s, which is a
-- validated lowercase address or NULL (the signer reported none, or an
-- invalid or zero one).
INSERT INTO signers (
    signer_key, health_state, health_detail, last_health_at, registered,
    observed_signer_address, observed_at
)
VALUES (
    %(key)s, %(health_state)s, %(health_detail)s, CASE WHEN %(reported)s THEN now() END, true,
    CASE WHEN %(observe)s THEN %(observed)s::text END,
    CASE WHEN %(observe)s AND %(observed)s::text IS NOT NULL THEN now() END
)
ON CONFLICT (signer_key) DO UPDATE SET
    health_state = EXCLUDED.health_state,
    health_detail = EXCLUDED.health_detail,
    last_health_at = coalesce(EXCLUDED.last_health_at, signers.last_health_at),
    registered = true,
    observed_signer_address = CASE WHEN %(observe)s
        THEN EXCLUDED.observed_signer_address ELSE signers.observed_signer_address END,
    observed_at = CASE WHEN %(observe)s
        THEN EXCLUDED.observed_at ELSE signers.observed_at END
