"""Intents checked at movement creation by the executors that will carry them out
(issue 26): where a provider has a format (an EVM address, a token's decimals),
an intent that can never work is a 422 naming the field before anyone approves
it, not a movement that fails after approval. No chain is contacted: the check
is the executor's `check_intent`, pure."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from .conftest import INTENT, Api, make_template

#: anvil's first well-known development key (public; never holds real funds).
DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
ADDRESS = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"
EVM_GRAPH = {
    "nodes": [
        {
            "key": "send",
            "kind": "action",
            "action_type": "evm_transfer",
            "executor_key": "evm",
            "config": {"evm": {"chain_id": 31337, "decimals": 6}},
        },
    ],
    "edges": [],
}


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    # The evm provider loaded beside the sandbox; its RPC URL is never called here.
    return {
        "providers": "sandbox,evm",
        "evm_rpc_urls": "31337=http://127.0.0.1:9",
        "evm_signer_private_key": DEV_KEY,
    }


async def _create(api: Api, template: str, intent: dict[str, Any]) -> Any:
    return await api["alice"].post(
        "/v3/movements",
        json={"template_key": template, "intent": intent},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )


async def test_an_evm_transfer_intent_is_checked_at_creation(api: Api) -> None:
    await make_template(api, "t.evm", EVM_GRAPH)
    refused = [
        ({**INTENT, "destination": "0xabc"}, "intent.destination", "EVM_BAD_DESTINATION"),
        ({**INTENT, "destination": "alice@example.com"}, "intent.destination", None),
        ({**INTENT, "destination": ADDRESS, "amount": "1.0000001"}, "intent.amount", None),
    ]
    for intent, field, reason in refused:
        r = await _create(api, "t.evm", intent)
        assert r.status_code == 422, (intent, r.text)
        error = r.json()["error"]
        assert error["detail"]["field"] == field, r.text
        assert error["detail"]["node_key"] == "send" and error["detail"]["executor"] == "evm"
        assert error["message"].startswith(f"{field}: "), error["message"]
        if reason:
            assert error["detail"]["reason"] == reason
    listed = await api["alice"].get("/v3/movements")
    assert listed.json()["items"] == []  # nothing half-created

    ok = await _create(api, "t.evm", {**INTENT, "destination": ADDRESS, "amount": "12.345678"})
    assert ok.status_code == 201, ok.text


async def test_a_provider_without_a_format_still_takes_any_destination(api: Api) -> None:
    # The sandbox's manual template has no destination format: nothing to check.
    await make_template(api)
    r = await _create(api, "t.manual", INTENT)
    assert r.status_code == 201, r.text


async def test_a_capital_transfer_over_an_evm_route_checks_its_destination(api: Api) -> None:
    """A capital transfer's movement is created with the same check: the transfer
    is recorded and left needing attention, naming the field, with no movement."""
    await make_template(api, "t.evm", EVM_GRAPH)
    r = await api["alice"].post(
        "/v3/capital-transfers",
        json={
            "asset": "USDC",
            "amount": "10.00",
            "source": "binance:treasury",
            "destination": "0xabc",
            "template_key": "t.evm",
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert r.status_code == 201, r.text
    transfer = r.json()
    assert transfer["status"] == "needs_attention" and transfer["request_id"] is None
    assert transfer["last_error"].startswith("intent.destination: "), transfer["last_error"]
