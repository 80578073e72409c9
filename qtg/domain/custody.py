"""The signer checks what it signs (issue 45 item 5): pure rules, no I/O.

Two things are compared before any signature is made:

1. **The approval seal.** At approval, in the approval's own transaction, the
   movement's money-moving content (intent, input params, plan hash, every
   node's action type, executor and config) is hashed into
   `movement_requests.approval_seal` (and the seal is written into the
   approval's audit row, which the keyed audit chain protects). Before signing,
   the same hash is taken over the rows as they are *now*: a row edited in the
   database after approval (a destination, an amount, a token, a chain id)
   gives another hash, and nothing is signed.

2. **The transaction against the approved movement.** For an `evm_transfer`
   the signer reads destination, asset (native coin or the token contract),
   amount and chain from the approved (sealed) movement on its own, and the
   transaction's `to`, `value`, `data` and `chainId` must say exactly that. A
   prepare that built anything else (a bug, a tampered node config that still
   matches a re-forged seal) is refused.

The seal is a plain sha256: someone who can write the database *and* knows
this encoding can re-forge it together with the plan hash. What they cannot
re-forge without the audit key is the approval's audit row, whose detail holds
the seal the approvers' decision produced (`qtg audit verify` finds the
difference). The comparison is kept here, in one place, and is used by the
signing path (qtg/services/custody.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qtg.domain.evm import erc20_transfer_data, is_address, to_base_units

#: (signer key, action type) pairs whose transaction is compared field by field with
#: the approved movement: the EVM signer's transfers. Others (ccip, cctp contract
#: calls, the sandbox's stand-in transactions) get the seal check only.
COMPARED_ACTIONS = frozenset({("evm_local", "evm_transfer")})

#: Error codes of a refusal (what the waiting node and the page carry).
SEAL_MISSING = "CUSTODY_SEAL_MISSING"
SEAL_MISMATCH = "CUSTODY_SEAL_MISMATCH"
TX_MISMATCH = "CUSTODY_TX_MISMATCH"
IDENTITY_MISMATCH = "SIGNER_IDENTITY_MISMATCH"

SEAL_VERSION = 1


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def approval_seal(request: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> str:
    """The seal of a movement as approved: sha256 over its request id, plan hash,
    intent, input params and every node's key, action type, executor and config
    (in node-key order). The same rows give the same seal in any process."""
    content = [
        SEAL_VERSION,
        str(request["id"]),
        request["compiled_plan_hash"],
        request["intent"],
        request["input_params"],
        [
            [n["node_key"], n["action_type"], n["executor_key"], n["config"]]
            for n in sorted(nodes, key=lambda n: str(n["node_key"]))
        ],
    ]
    return hashlib.sha256(_canonical(content)).hexdigest()


def seal_problem(
    request: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
) -> tuple[str, str] | None:
    """(code, why) when the movement's rows no longer match the seal its approval
    wrote, or it has none; None when they match."""
    sealed = request.get("approval_seal")
    if not sealed:
        return (
            SEAL_MISSING,
            "the movement carries no approval seal: it was not approved through qtg's "
            "approval (or the seal was removed); nothing is signed",
        )
    if approval_seal(request, nodes) != sealed:
        return (
            SEAL_MISMATCH,
            "the movement's rows changed after approval (its approval seal no longer "
            "matches the intent, plan or node config): nothing is signed",
        )
    return None


@dataclass(frozen=True, slots=True)
class ApprovedTransfer:
    """An `evm_transfer` as the approvers saw it: chain, asset, destination, amount."""

    chain_id: int
    token: str | None  # None: the chain's native coin
    destination: str
    value: int  # base units


def approved_transfer(
    intent: Mapping[str, Any], node_config: Mapping[str, Any]
) -> ApprovedTransfer | str:
    """The signer's own reading of an approved `evm_transfer` (intent first, then
    the node's `evm` config, as the reference's executor reads it); a string
    saying why when the approved movement does not define one."""
    cfg = node_config.get("evm")
    if not isinstance(cfg, Mapping):
        return "the node has no evm config"
    chain_id = cfg.get("chain_id")
    if not isinstance(chain_id, int) or isinstance(chain_id, bool):
        return f"evm.chain_id {chain_id!r} is not a chain id"
    destination = intent.get("destination", cfg.get("destination"))
    if not is_address(destination):
        return f"destination {destination!r} is not an address"
    token = cfg.get("token")
    if token is not None and not is_address(token):
        return f"evm.token {token!r} is not an address"
    try:
        amount = str(intent.get("amount", cfg.get("amount")))
        value = to_base_units(amount, int(cfg.get("decimals", 18)))
    except (ValueError, TypeError) as exc:
        return f"amount: {exc}"
    return ApprovedTransfer(chain_id=chain_id, token=token, destination=destination, value=value)


def _int(value: Any) -> int | None:
    try:
        if isinstance(value, str) and value.startswith("0x"):
            return int(value, 16)
        return int(value)
    except (TypeError, ValueError):
        return None


def transfer_mismatch(tx: Mapping[str, Any], approved: ApprovedTransfer) -> str | None:
    """Why the transaction `tx` (the prepared evm_tx_json) is not the approved
    transfer, or None when chain, asset, destination and amount all agree."""
    if _int(tx.get("chainId")) != approved.chain_id:
        return f"chainId {tx.get('chainId')!r} is not the approved chain {approved.chain_id}"
    to = str(tx.get("to") or "").lower()
    data = str(tx.get("data") or "0x").lower()
    value = _int(tx.get("value"))
    if approved.token is None:
        if to != approved.destination.lower():
            return f"to {tx.get('to')!r} is not the approved destination {approved.destination}"
        if value != approved.value:
            return f"value {tx.get('value')!r} is not the approved amount {approved.value}"
        if data not in ("0x", ""):
            return "a native transfer carries call data"
        return None
    if to != approved.token.lower():
        return f"to {tx.get('to')!r} is not the approved token {approved.token}"
    if value != 0:
        return f"a token transfer sends native value {tx.get('value')!r}"
    if data != erc20_transfer_data(approved.destination, approved.value).lower():
        return (
            "the call data is not transfer(approved destination, approved amount) "
            f"({approved.destination}, {approved.value})"
        )
    return None


#: What a fee-bump replacement may not change: everything but the fees.
REPLACEMENT_FIXED = ("from", "to", "value", "data", "gas", "nonce", "chainId")


def replacement_problem(payload: Mapping[str, Any], signed: Mapping[str, Any]) -> str | None:
    """Why `payload` (the kept transaction's payload column, about to be signed again
    with bumped fees) is not the transaction whose signed bytes were kept (`signed`:
    the fields decoded from those bytes, `from` recovered from their signature); None
    when only the fees differ. The signed bytes are the evidence: a payload column
    edited in the database must never become a new signature."""
    for field in REPLACEMENT_FIXED:
        ours, theirs = payload.get(field), signed.get(field)
        if field in ("from", "to", "data"):
            same = str(ours or "").lower() == str(theirs or "").lower()
        else:
            same = _int(ours) is not None and _int(ours) == _int(theirs)
        if not same:
            return f"{field} {ours!r} is not the signed transaction's {theirs!r}"
    return None


def identity_mismatch(expected: str | None, observed: str | None) -> str | None:
    """Why a signer may not sign now: its enrolled identity (expected_signer_address)
    is not the address it signs as. None when they agree or nothing is enrolled (an
    unenrolled signer is the roster's `unenrolled` posture, not a movement-time stop)."""
    if not expected:
        return None
    if not observed or observed.lower() != expected.lower():
        return (
            f"the signer signs as {observed or 'an unknown address'}, but its enrolled "
            f"identity is {expected}: nothing is signed until they agree"
        )
    return None
