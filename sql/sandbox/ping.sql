-- Reachable and readable: the health check of the sandbox's "remote system".
SELECT EXISTS (SELECT 1 FROM sandbox_submissions) AS has_submissions
