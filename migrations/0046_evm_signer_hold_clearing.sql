-- Clearing a signer hold is four-eyes (issue 43 item 2): one operator proposes it with
-- the evidence that the signer may sign again (the key is qtg's alone, the transactions
-- that matched no node are accounted for), a different operator confirms it. The
-- proposal is kept on the hold until it is confirmed.
ALTER TABLE evm_signer_holds
    ADD COLUMN clear_proposed_by text,
    ADD COLUMN clear_proposed_at timestamptz,
    ADD COLUMN clear_proposed_evidence text,
    ADD CONSTRAINT evm_signer_holds_clear_proposal CHECK (
        (clear_proposed_by IS NULL) = (clear_proposed_at IS NULL)
        AND (clear_proposed_by IS NULL) = (clear_proposed_evidence IS NULL)
    );
