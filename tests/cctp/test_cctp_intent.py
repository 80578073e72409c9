"""cctp's check_intent (no I/O): what USDC can never carry is refused at movement creation."""

from __future__ import annotations

import pytest

from qtg.providers.base import IntentRejected
from qtg.providers.cctp.executor import CctpExecutor

CFG = {"cctp": {"source_chain_id": 31337, "destination_chain_id": 31338}}
GOOD = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def _executor() -> CctpExecutor:
    return CctpExecutor(
        None,  # type: ignore[arg-type]  (check_intent touches nothing)
        {},
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        {},
        attestation_url="http://127.0.0.1:9",
        attestation_timeout=1,
        attestation_poll=1,
        mint_poll=1,
    )


@pytest.mark.parametrize(
    ("intent", "field", "code"),
    [
        ({"amount": "1.0000001", "destination": GOOD}, "amount", "CCTP_BAD_AMOUNT"),  # 7 decimals
        ({"amount": "0", "destination": GOOD}, "amount", "CCTP_BAD_AMOUNT"),
        ({"amount": "1", "destination": "bc1qnotevm"}, "destination", "CCTP_BAD_DESTINATION"),
    ],
)
def test_an_intent_usdc_cannot_carry_is_refused(intent, field, code) -> None:
    with pytest.raises(IntentRejected) as caught:
        _executor().check_intent(intent, CFG)
    assert (caught.value.field, caught.value.code) == (field, code)


def test_six_decimals_pass() -> None:
    _executor().check_intent({"amount": "12.345678", "destination": GOOD}, CFG)
