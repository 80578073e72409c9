-- The database's clock at the start of this reaper pass (its transaction's now()).
SELECT now()
