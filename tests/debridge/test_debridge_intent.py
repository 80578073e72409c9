"""debridge's check_intent (no I/O): what an order could never carry is refused at movement
creation, naming the field."""

from __future__ import annotations

import pytest

from qtg.domain.debridge import Chain
from qtg.providers.base import IntentRejected
from qtg.providers.debridge.executor import DebridgeExecutor

CFG = {"debridge": {"source_chain_id": 31337, "destination_chain_id": 31338}}
GOOD = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
A, B = "0x" + "aa" * 20, "0x" + "bb" * 20


def _executor() -> DebridgeExecutor:
    chains = {
        31337: Chain(31337, A, A, {"USDC": A, "USDT": A}),
        31338: Chain(31338, B, B, {"USDC": B}),
    }
    return DebridgeExecutor(
        None,  # type: ignore[arg-type]  (check_intent touches nothing)
        {},
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        chains,
        status_url="http://127.0.0.1:9",
        status_timeout=1,
        fulfillment_poll=1,
        unfulfilled_after=1,
    )


@pytest.mark.parametrize(
    ("intent", "field", "code"),
    [
        ({"asset": "USDC", "amount": "1.0000001", "destination": GOOD}, "amount",
         "DEBRIDGE_BAD_AMOUNT"),
        ({"asset": "USDC", "amount": "0", "destination": GOOD}, "amount", "DEBRIDGE_BAD_AMOUNT"),
        ({"asset": "USDC", "amount": "1", "destination": "bc1q"}, "destination",
         "DEBRIDGE_BAD_DESTINATION"),
        ({"asset": "USDT", "amount": "1", "destination": GOOD}, "asset",  # not on B
         "DEBRIDGE_ASSET_UNKNOWN"),
        ({"asset": "DAI", "amount": "1", "destination": GOOD}, "asset", "DEBRIDGE_ASSET_UNKNOWN"),
    ],
)  # fmt: skip
def test_an_intent_no_order_can_carry_is_refused(intent, field, code) -> None:
    with pytest.raises(IntentRejected) as caught:
        _executor().check_intent(intent, CFG)
    assert (caught.value.field, caught.value.code) == (field, code)


def test_a_token_on_both_chains_passes() -> None:
    _executor().check_intent({"asset": "usdc", "amount": "12.345678", "destination": GOOD}, CFG)
