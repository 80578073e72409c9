"""qtg.domain.custody: the seal over an approved movement, and the signer's
comparison of a transaction with the approved transfer (issue 45 item 5)."""

from __future__ import annotations

import copy

import pytest

from qtg.domain.custody import (
    SEAL_MISMATCH,
    SEAL_MISSING,
    ApprovedTransfer,
    approval_seal,
    approved_transfer,
    identity_mismatch,
    replacement_problem,
    seal_problem,
    transfer_mismatch,
)
from qtg.domain.evm import erc20_transfer_data

DEST = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"
OTHER = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc"
TOKEN = "0x5fbdb2315678afecb367f032d93f642f64180aa3"

REQUEST = {
    "id": "6f1c1f6e-0000-4000-8000-000000000001",
    "compiled_plan_hash": "ab" * 32,
    "intent": {"asset": "ETH", "amount": "1.5", "destination": DEST},
    "input_params": {},
}
NODES = [
    {
        "node_key": "send",
        "action_type": "evm_transfer",
        "executor_key": "evm",
        "config": {"evm": {"chain_id": 31337}},
    }
]


def sealed(request=REQUEST, nodes=NODES):
    return {**request, "approval_seal": approval_seal(request, nodes)}


def test_the_same_rows_give_the_same_seal_and_it_matches() -> None:
    assert approval_seal(REQUEST, NODES) == approval_seal(copy.deepcopy(REQUEST), NODES)
    assert seal_problem(sealed(), NODES) is None


@pytest.mark.parametrize(
    "edit",
    [
        lambda r, n: r["intent"].update(destination=OTHER),
        lambda r, n: r["intent"].update(amount="150"),
        lambda r, n: r["intent"].update(asset="USDC"),
        lambda r, n: r.update(compiled_plan_hash="cd" * 32),
        lambda r, n: r["input_params"].update(chain_family="other"),
        lambda r, n: n[0]["config"]["evm"].update(chain_id=1),
        lambda r, n: n[0]["config"]["evm"].update(token=TOKEN),
        lambda r, n: n[0].update(executor_key="sandbox"),
    ],
    ids=["destination", "amount", "asset", "plan", "params", "chain", "token", "executor"],
)
def test_any_edit_after_approval_breaks_the_seal(edit) -> None:
    approved = sealed()
    request, nodes = copy.deepcopy(approved), copy.deepcopy(NODES)
    edit(request, nodes)
    problem = seal_problem(request, nodes)
    assert problem is not None and problem[0] == SEAL_MISMATCH
    assert "changed after approval" in problem[1]


def test_a_movement_without_a_seal_is_refused() -> None:
    code, why = seal_problem({**REQUEST, "approval_seal": None}, NODES)  # type: ignore[misc]
    assert code == SEAL_MISSING and "no approval seal" in why


def native_tx(**changes):
    tx = {
        "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
        "to": DEST,
        "value": str(15 * 10**17),
        "data": "0x",
        "chainId": "31337",
        "nonce": "0",
    }
    tx.update(changes)
    return tx


NATIVE = ApprovedTransfer(chain_id=31337, token=None, destination=DEST, value=15 * 10**17)


def test_the_approved_native_transfer_passes() -> None:
    assert approved_transfer(REQUEST["intent"], NODES[0]["config"]) == NATIVE
    assert transfer_mismatch(native_tx(), NATIVE) is None
    assert transfer_mismatch(native_tx(to=DEST.upper().replace("0X", "0x")), NATIVE) is None


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"to": OTHER}, "destination"),
        ({"value": str(15 * 10**17 + 1)}, "amount"),
        ({"chainId": "1"}, "chain"),
        ({"data": "0xdeadbeef"}, "call data"),
    ],
)
def test_a_native_transaction_that_is_not_the_approved_one_is_refused(changes, says) -> None:
    why = transfer_mismatch(native_tx(**changes), NATIVE)
    assert why is not None and says in why


def test_a_token_transfer_is_compared_through_its_call_data() -> None:
    approved = approved_transfer(
        {"amount": "12.5", "destination": DEST},
        {"evm": {"chain_id": 31337, "token": TOKEN, "decimals": 6}},
    )
    assert approved == ApprovedTransfer(
        chain_id=31337, token=TOKEN, destination=DEST, value=12_500_000
    )
    good = native_tx(to=TOKEN, value="0", data=erc20_transfer_data(DEST, 12_500_000))
    assert transfer_mismatch(good, approved) is None
    for bad in (
        {"data": erc20_transfer_data(OTHER, 12_500_000)},  # another destination
        {"data": erc20_transfer_data(DEST, 12_500_001)},  # another amount
        {"to": OTHER},  # another token
        {"value": "1"},  # native value on top
    ):
        assert transfer_mismatch({**good, **bad}, approved) is not None


def test_an_approved_movement_that_defines_no_transfer_says_why() -> None:
    assert "not an address" in approved_transfer(
        {"destination": "nope", "amount": "1"}, {"evm": {"chain_id": 1}}
    )
    assert "chain id" in approved_transfer({"destination": DEST, "amount": "1"}, {"evm": {}})
    assert "evm config" in approved_transfer({"destination": DEST, "amount": "1"}, {})


def test_identity_is_enforced_only_when_enrolled() -> None:
    assert identity_mismatch(None, DEST) is None  # unenrolled: the roster says so, no stop
    assert identity_mismatch(DEST, DEST.upper().replace("0X", "0x")) is None
    assert "enrolled identity" in identity_mismatch(DEST, OTHER)  # type: ignore[operator]
    assert identity_mismatch(DEST, None) is not None


SIGNED = {
    "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
    "to": DEST,
    "value": 15 * 10**17,
    "data": "0x",
    "gas": 21000,
    "nonce": 7,
    "chainId": 31337,
}


def test_a_replacement_may_change_only_the_fees() -> None:
    payload = {
        **{k: str(v) for k, v in SIGNED.items()},
        "from": SIGNED["from"].upper().replace("0X", "0x"),
        "maxFeePerGas": "999",
        "maxPriorityFeePerGas": "9",
        "type": 2,
    }
    assert replacement_problem(payload, SIGNED) is None
    for field, value in (("to", OTHER), ("value", "1"), ("data", "0xab"), ("nonce", "8")):
        why = replacement_problem({**payload, field: value}, SIGNED)
        assert why is not None and why.startswith(field)
    assert replacement_problem(payload, {}) is not None  # bytes we cannot read: never
