"""The sandbox's lanes: every action_type the reference names, and what each returns.

Pure functions, no I/O. A lane says whether its action_type has a side effect
(an `action` node submits it) or only watches (an `observe` node), whether its
payload must be signed, which provider_refs it hands back and which artifacts
its completing observation reports. The values look like the real thing
(`0x`-prefixed 32-byte tx hashes, `wd_…` withdrawal ids, CCIP message ids …)
so that `$ref:withdraw.txid` in a successor's config resolves to something
that reads like a txid; they are derived from the idempotency key (or, for an
observe-only node, its node id), so the same submission always reports the
same refs.

An observe lane reports the refs of what it watches: when a predecessor
already produced one (a `ccip_delivery` after a `ccip_send` sees the
`message_id` in provider_context), it echoes that value rather than inventing
a new one, as a real status endpoint would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from qtg.domain.context import ExecutionContext
from qtg.domain.plan import canonical_json

SIGNER_KEY = "sandbox"


@dataclass(frozen=True, slots=True)
class Lane:
    action_type: str
    side_effect: bool
    needs_signature: bool = False
    refs: tuple[str, ...] = ()  # provider_refs (submit for actions, completion for observes)
    results: Mapping[str, Any] = field(default_factory=dict)  # extra completion artifacts
    # completion artifacts whose values are derived like refs (block numbers, attestations)
    derived_results: tuple[str, ...] = ()


_LANES = (
    # -- centralised exchange
    Lane("cex_withdrawal", True, refs=("withdrawal_id", "txid", "tx_hash"),
         results={"withdrawal_status": "COMPLETED", "fee": "0"}),
    Lane("cex_withdrawal_status", False, refs=("withdrawal_id", "txid"),
         results={"withdrawal_status": "COMPLETED"}),
    Lane("cex_deposit_status", False, refs=("deposit_id", "txid"),
         results={"deposit_status": "CREDITED"}),
    # -- plain chain observation
    Lane("destination_chain_receive_observe", False, refs=("dest_tx_hash",),
         results={"received": True}, derived_results=("block_number",)),
    Lane("destination_chain_finality_observe", False, refs=("dest_tx_hash",),
         results={"finalized": True, "confirmations": 64}, derived_results=("block_number",)),
    Lane("protocol_observe", False, refs=("position_id",), results={"protocol_state": "settled"}),
    Lane("evm_transfer", True, needs_signature=True, refs=("tx_hash", "txid")),
    # -- Circle CCTP
    Lane("cctp_burn", True, needs_signature=True,
         refs=("tx_hash", "txid", "message_hash", "nonce")),
    Lane("cctp_attestation", False, refs=("message_hash", "attestation"),
         results={"attestation_status": "complete"}),
    Lane("cctp_mint", True, needs_signature=True, refs=("tx_hash", "txid")),
    Lane("cctp_mint_status", False, refs=("tx_hash",), results={"minted": True}),
    # -- Chainlink CCIP
    Lane("ccip_send", True, needs_signature=True, refs=("tx_hash", "txid", "message_id")),
    Lane("ccip_delivery", False, refs=("message_id", "dest_tx_hash"),
         results={"delivery_status": "SUCCESS"}),
    # -- deBridge
    Lane("debridge_send", True, refs=("tx_hash", "txid", "order_id")),
    Lane("debridge_fulfillment", False, refs=("order_id", "dest_tx_hash"),
         results={"fulfilled": True}),
    # -- Stargate / LayerZero
    Lane("stargate_send", True, refs=("tx_hash", "txid", "guid")),
    Lane("stargate_delivery", False, refs=("guid", "dest_tx_hash"), results={"delivered": True}),
)  # fmt: skip

LANES: dict[str, Lane] = {lane.action_type: lane for lane in _LANES}
ACTION_TYPES: frozenset[str] = frozenset(LANES)
SIDE_EFFECT_ACTION_TYPES: frozenset[str] = frozenset(t for t, ln in LANES.items() if ln.side_effect)
OBSERVE_ACTION_TYPES: frozenset[str] = ACTION_TYPES - SIDE_EFFECT_ACTION_TYPES


def _json(value: Any) -> str:
    return canonical_json(value).decode()


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------ payloads


def build_payload(lane: Lane, ctx: ExecutionContext) -> tuple[str, str]:
    """(payload_format, payload): deterministic in the context, so a retried prepare of
    the same attempt produces the same bytes and the same hash."""
    ids = {
        "request_id": ctx.request_id,
        "request_node_id": ctx.request_node_id,
        "attempt_no": ctx.attempt_no,
        "compiled_plan_hash": ctx.compiled_plan_hash,
    }
    call = {"action_type": lane.action_type, "intent": ctx.intent, "node_config": ctx.node_config}
    if not lane.needs_signature:
        return "json", _json({**call, "qtg": ids})
    # Shaped like an EVM transaction; `to` is a stand-in contract per lane and `data`
    # commits to the call, which is also carried in clear for inspection.
    tx = {
        "type": "evm_tx",
        "chain": str(
            ctx.node_config.get("chain")
            or ctx.intent.get("source_chain")
            or ctx.input_params.get("chain")
            or "sandbox"
        ),
        "to": "0x" + sha256_hex(f"sandbox-contract|{lane.action_type}")[-40:],
        "value": "0",
        "data": "0x" + sha256_hex(_json(call)),
        "call": call,
        "qtg": ids,
    }
    return "evm_tx_json", _json(tx)


# ------------------------------------------------------------ refs, artifacts


def _derive(seed: str, name: str) -> Any:
    digest = sha256_hex(f"{seed}|{name}")
    if name in ("txid", "tx_hash"):  # one transaction, two names
        return "0x" + sha256_hex(f"{seed}|tx")
    if name in ("nonce", "block_number"):
        return 1_000_000 + int(digest[:8], 16) % 9_000_000
    if name == "withdrawal_id":
        return "wd_" + digest[:20]
    if name == "deposit_id":
        return "dep_" + digest[:20]
    if name == "position_id":
        return "pos_" + digest[:16]
    if name == "attestation":  # 65-byte signature
        return (
            "0x" + (digest + sha256_hex(f"{seed}|{name}|2") + sha256_hex(f"{seed}|{name}|3"))[:130]
        )
    return "0x" + digest  # 32-byte ids and hashes: message_id, message_hash, guid, order_id …


def submission_refs(lane: Lane, idempotency_key: str) -> dict[str, Any]:
    """provider_refs of an action lane's submission."""
    return {name: _derive(idempotency_key, name) for name in lane.refs}


def observed_refs(lane: Lane, seed: str, provider_context: Mapping[str, Any]) -> dict[str, Any]:
    """provider_refs of an observe lane: what its predecessors already named, else derived."""
    return {
        name: provider_context[name] if name in provider_context else _derive(seed, name)
        for name in lane.refs
    }


def completion_artifacts(
    lane: Lane, seed: str, refs: Mapping[str, Any], intent: Mapping[str, Any]
) -> dict[str, Any]:
    """What the completing observation reports: refs, the moved amount, lane results."""
    artifacts: dict[str, Any] = {}
    for name in ("amount", "asset"):
        if name in intent:
            artifacts[name] = str(intent[name])
    artifacts.update(refs)
    artifacts.update(lane.results)
    for name in lane.derived_results:
        artifacts[name] = _derive(seed, name)
    return artifacts
