-- A provider's own cancel of what a node started (deBridge's sendEvmOrderCancel, issue 46
-- review item b): kept like any signed transaction, but never itself "cancelled" by the
-- nonce reaper's cancel step. It is the lever of a FAILED resolution, so the reconcile
-- pass sends its kept bytes again where a payment of a node resolved FAILED would be
-- replaced by a zero-value self-transfer (which would undo the lever: the order stays
-- fillable and the resolution waits for ever).
ALTER TABLE evm_signed_transactions DROP CONSTRAINT evm_signed_transactions_kind_check;
ALTER TABLE evm_signed_transactions ADD CONSTRAINT evm_signed_transactions_kind_check
    CHECK (kind IN ('payment', 'replacement', 'gap_fill', 'cancel', 'provider_cancel'));
