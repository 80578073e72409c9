-- One audit archiver at a time while an anchor is checked, written and its file
-- published (released at commit): two prunes never anchor overlapping ranges.
SELECT pg_advisory_xact_lock(hashtextextended('qtg.audit_archive', 0))
