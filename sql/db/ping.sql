-- Liveness probe for long-lived connections (the LISTEN hub, readiness).
SELECT 1 AS ok
