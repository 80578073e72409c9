-- An operator's FAILED resolution waits for the chain: wake evm_nonce_reaper on this
-- commit, so its cancel step runs now instead of at its next interval (up to 60 s).
-- Through qtg_notify, as every trigger: `SET qtg.notify = off` silences it too.
SELECT qtg_notify('qtg_evm_reaper')
