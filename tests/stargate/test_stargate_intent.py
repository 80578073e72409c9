"""stargate's check_intent (no I/O): what the token can never carry is refused at movement
creation, before anyone approves it."""

from __future__ import annotations

import pytest

from qtg.providers.base import IntentRejected
from qtg.providers.stargate.executor import StargateExecutor

CFG = {"stargate": {"source_chain_id": 31337, "destination_chain_id": 31338}}
GOOD = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def _executor() -> StargateExecutor:
    return StargateExecutor(
        None,  # type: ignore[arg-type]  (check_intent touches nothing)
        {},
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        {},
        delivery_poll=1,
    )


@pytest.mark.parametrize(
    ("intent", "cfg", "field", "code"),
    [
        ({"amount": "1.0000001", "destination": GOOD}, CFG, "amount", "STARGATE_BAD_AMOUNT"),
        ({"amount": "-3", "destination": GOOD}, CFG, "amount", "STARGATE_BAD_AMOUNT"),
        (
            {"amount": "1", "destination": "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb"},
            CFG,
            "destination",
            "STARGATE_BAD_DESTINATION",
        ),
    ],
)
def test_an_intent_the_token_cannot_carry_is_refused(intent, cfg, field, code) -> None:
    with pytest.raises(IntentRejected) as caught:
        _executor().check_intent(intent, cfg)
    assert (caught.value.field, caught.value.code) == (field, code)


def test_the_configured_decimals_decide() -> None:
    _executor().check_intent({"amount": "12.345678", "destination": GOOD}, CFG)
    cfg18 = {"stargate": {**CFG["stargate"], "decimals": 18}}
    _executor().check_intent({"amount": "1.0000001", "destination": GOOD}, cfg18)
