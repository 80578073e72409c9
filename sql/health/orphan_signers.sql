-- Signers this runtime no longer has: the row becomes an orphan and its
-- observation is cleared (nothing is observing it any more). The expected
-- identity an admin enrolled is kept.
UPDATE signers
SET registered = false,
    observed_signer_address = NULL,
    observed_at = NULL
WHERE NOT (signer_key = ANY(%(keys)s::text[]))
  AND (registered OR observed_signer_address IS NOT NULL)
