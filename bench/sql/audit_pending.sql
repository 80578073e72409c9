-- qtg-bench: audit facts not promoted yet.
SELECT /* qtg-bench */ count(*) AS pending FROM audit_outbox
