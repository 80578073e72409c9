"""Pure CCIP rules (issue 12): lanes, calldata, logs, the reaper's verdict, drift.

No I/O: the `ccip` provider and the ccip services feed these facts read from
the chain (or a sidecar) and the database, so what decides that a message was
sent, never sent, or that a lane drifted can be read and tested on its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from eth_hash.auto import keccak

from qtg.domain.errors import ConfigError
from qtg.domain.evm import is_address

LANES_ENV = "MG_CCIP_LANES"
UINT64_MAX = 2**64 - 1


def _selector(signature: str) -> str:
    return keccak(signature.encode())[:4].hex()


def _topic(signature: str) -> str:
    return "0x" + keccak(signature.encode()).hex()


def encode(types: list[str], values: list[Any]) -> bytes:
    """eth-abi's encode, imported on first use: eth-abi brings eth-utils (~15 MB
    of RSS), and this module is imported by every runtime for the
    ccip_stranded_reaper (on by default), which never encodes calldata."""
    from eth_abi import encode as abi_encode

    return abi_encode(types, values)


_MESSAGE = "(bytes,bytes,(address,uint256)[],address,bytes)"
CCIP_SEND = _selector(f"ccipSend(uint64,{_MESSAGE})")
GET_FEE = _selector(f"getFee(uint64,{_MESSAGE})")
ROUTER_GET_ON_RAMP = _selector("getOnRamp(uint64)")
ROUTER_IS_OFF_RAMP = _selector("isOffRamp(uint64,address)")
GET_SUPPORTED_TOKENS = _selector("getSupportedTokens(uint64)")
SIMULATOR_CONFIGURATION = _selector("configuration()")
TOKEN_ADMIN_GET_POOL = _selector("getPool(address)")
#: Client._argsToBytes(EVMExtraArgsV1): bytes4(keccak256("CCIP EVMExtraArgsV1"))
EVM_EXTRA_ARGS_V1_TAG = keccak(b"CCIP EVMExtraArgsV1")[:4]

# ---- the events that carry a message id
#: OnRamp 1.6: CCIPMessageSent(uint64 indexed dest, uint64 indexed seq, EVM2AnyRampMessage)
CCIP_MESSAGE_SENT = _topic(
    "CCIPMessageSent(uint64,uint64,((bytes32,uint64,uint64,uint64,uint64),address,bytes,"
    "bytes,bytes,address,uint256,uint256,(address,bytes,bytes,uint256,bytes)[]))"
)
#: EVM2EVMOnRamp 1.5: CCIPSendRequested(EVM2EVMMessage); messageId is the head's 13th word.
CCIP_SEND_REQUESTED = _topic(
    "CCIPSendRequested((uint64,address,address,uint64,uint256,bool,uint64,address,uint256,"
    "bytes,(address,uint256)[],bytes[],bytes32))"
)
#: Router (and Chainlink Local's MockCCIPRouter): MessageExecuted(messageId, source, offRamp, hash)
MESSAGE_EXECUTED = _topic("MessageExecuted(bytes32,uint64,address,bytes32)")
#: OffRamp 1.6: ExecutionStateChanged(uint64 indexed src, uint64 indexed seq,
#: bytes32 indexed messageId, bytes32 messageHash, uint8 state, bytes returnData, uint256 gas)
EXECUTION_STATE_CHANGED = _topic(
    "ExecutionStateChanged(uint64,uint64,bytes32,bytes32,uint8,bytes,uint256)"
)


class IntentState(StrEnum):
    PENDING = "pending"
    BROADCAST = "broadcast"
    SENT = "sent"
    SUCCESS = "success"
    FAILURE = "failure"
    MANUAL_EXECUTION_NEEDED = "manual_execution_needed"
    REVERTED = "reverted"
    RELEASED = "released"
    STRANDED = "stranded"


class Execution(StrEnum):
    """A message's execution state on the destination, as the chain reports it."""

    SUCCESS = "success"
    FAILURE = "failure"
    MANUAL_EXECUTION_NEEDED = "manual_execution_needed"


# ------------------------------------------------------------------ lanes


@dataclass(frozen=True, slots=True)
class Lane:
    """One configured CCIP lane (an item of MG_CCIP_LANES)."""

    name: str
    chain_id: int  # the source chain (MG_EVM_RPC_URLS key)
    source_selector: int
    dest_selector: int
    router: str
    dest_chain_id: int
    #: where the destination execution is read: "router" (its MessageExecuted, as
    #: Chainlink Local's router emits) or "off_ramp" (OffRamp ExecutionStateChanged)
    execution: str
    dest_router: str
    off_ramp: str | None = None
    on_ramp: str | None = None
    registry: str | None = None  # Chainlink Local's simulator: configuration(), tokens
    token_admin_registry: str | None = None  # getPool(token), on a real deployment
    #: token -> expected pool (an address, or "supported" where there is no registry)
    tokens: Mapping[str, str] = field(default_factory=dict)
    #: token -> {"capacity": str, "rate": str}, compared when the sidecar reports them
    rate_limits: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _lane_error(index: int, what: str) -> ConfigError:
    return ConfigError(f"{LANES_ENV}: lane {index}: {what}")


def _addr(item: Mapping[str, Any], key: str, index: int, *, required: bool) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not is_address(value):
        raise _lane_error(index, f"{key} must be an address (0x + 40 hex), got {value!r}")
    return str(value).lower()


def _selector_value(item: Mapping[str, Any], key: str, index: int) -> int:
    value = item.get(key)
    try:
        number = int(value) if isinstance(value, int | str) and not isinstance(value, bool) else -1
    except ValueError:
        number = -1
    if not 0 <= number <= UINT64_MAX:
        raise _lane_error(index, f"{key} must be a uint64 chain selector, got {value!r}")
    return number


def parse_lanes(raw: str) -> dict[str, Lane]:
    """MG_CCIP_LANES (a JSON list of lanes) by name; a bad item names the variable and field."""
    if not raw.strip():
        return {}
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{LANES_ENV}: not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{LANES_ENV}: expected a JSON list of lanes")
    lanes: dict[str, Lane] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _lane_error(index, "expected an object")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise _lane_error(index, "name must be a non-empty string")
        if name in lanes:
            raise _lane_error(index, f"name {name!r} is used twice")
        chain_id = item.get("chain_id")
        if not isinstance(chain_id, int) or isinstance(chain_id, bool) or chain_id <= 0:
            raise _lane_error(index, f"chain_id must be a positive integer, got {chain_id!r}")
        dest_chain_id = item.get("dest_chain_id", chain_id)
        if not isinstance(dest_chain_id, int) or dest_chain_id <= 0:
            raise _lane_error(index, "dest_chain_id must be a positive integer")
        execution = item.get("execution", "router")
        if execution not in ("router", "off_ramp"):
            raise _lane_error(index, f"execution must be router or off_ramp, got {execution!r}")
        router = _addr(item, "router", index, required=True)
        off_ramp = _addr(item, "off_ramp", index, required=execution == "off_ramp")
        tokens_raw = item.get("tokens", {})
        if isinstance(tokens_raw, list):
            tokens_raw = {t: "supported" for t in tokens_raw}
        if not isinstance(tokens_raw, dict):
            raise _lane_error(index, "tokens must be a list of addresses or {token: pool}")
        tokens: dict[str, str] = {}
        for token, pool in tokens_raw.items():
            if not is_address(token) or not (pool == "supported" or is_address(pool)):
                raise _lane_error(index, f"tokens: {token!r}: {pool!r} is not an address pair")
            tokens[token.lower()] = pool.lower()
        limits = item.get("rate_limits", {})
        if not isinstance(limits, dict) or not all(
            is_address(t) and isinstance(v, dict) for t, v in limits.items()
        ):
            raise _lane_error(index, "rate_limits must be {token: {capacity, rate}}")
        assert router is not None
        lanes[name] = Lane(
            name=name,
            chain_id=chain_id,
            source_selector=_selector_value(item, "source_selector", index),
            dest_selector=_selector_value(item, "dest_selector", index),
            router=router,
            dest_chain_id=dest_chain_id,
            execution=execution,
            dest_router=_addr(item, "dest_router", index, required=False) or router,
            off_ramp=off_ramp,
            on_ramp=_addr(item, "on_ramp", index, required=False),
            registry=_addr(item, "registry", index, required=False),
            token_admin_registry=_addr(item, "token_admin_registry", index, required=False),
            tokens=tokens,
            rate_limits={
                t.lower(): {k: str(v) for k, v in spec.items()} for t, spec in limits.items()
            },
        )
    return lanes


# ------------------------------------------------------------------ calldata


def evm2any_message(
    receiver: str, token: str, amount: int, fee_token: str | None, gas_limit: int
) -> tuple[Any, ...]:
    """Client.EVM2AnyMessage for a token transfer to an EVM receiver (no data)."""
    extra_args = EVM_EXTRA_ARGS_V1_TAG + encode(["uint256"], [gas_limit])
    return (
        encode(["address"], [receiver]),
        b"",
        [(token, amount)],
        fee_token or "0x" + "0" * 40,
        extra_args,
    )


def _message_call(selector: str, dest_selector: int, message: tuple[Any, ...]) -> str:
    return "0x" + selector + encode(["uint64", _MESSAGE], [dest_selector, message]).hex()


def ccip_send_data(dest_selector: int, message: tuple[Any, ...]) -> str:
    return _message_call(CCIP_SEND, dest_selector, message)


def get_fee_data(dest_selector: int, message: tuple[Any, ...]) -> str:
    return _message_call(GET_FEE, dest_selector, message)


def uint64_call(selector: str, value: int) -> str:
    return "0x" + selector + f"{value:064x}"


def words(hex_data: str) -> list[str]:
    """A return value or log data as 32-byte words (hex, no 0x)."""
    body = hex_data[2:] if hex_data.startswith("0x") else hex_data
    return [body[i : i + 64] for i in range(0, len(body), 64)]


def word_address(word: str) -> str:
    return "0x" + word[-40:].lower()


def address_array(hex_data: str) -> list[str]:
    """An ABI-encoded `address[]` return value."""
    w = words(hex_data)
    if len(w) < 2:
        return []
    start = int(w[0], 16) // 32
    count = int(w[start], 16)
    return [word_address(x) for x in w[start + 1 : start + 1 + count]]


# ------------------------------------------------------------------ logs


def message_id_from_logs(logs: Sequence[Mapping[str, Any]]) -> str | None:
    """The CCIP message id a ccipSend receipt's logs carry, or None.

    OnRamp 1.6 CCIPMessageSent (header.messageId, the first word of the message),
    OnRamp 1.5 CCIPSendRequested (messageId, the head's last word) or, on Chainlink
    Local where the router delivers within the send, the router's MessageExecuted.
    """
    for entry in logs:
        topics = [t.lower() for t in entry.get("topics") or []]
        if not topics:
            continue
        w = words(entry.get("data") or "0x")
        if topics[0] == CCIP_MESSAGE_SENT and len(w) > 1:
            return "0x" + w[1]
        if topics[0] == CCIP_SEND_REQUESTED and len(w) > 13:
            return "0x" + w[13]
        if topics[0] == MESSAGE_EXECUTED and w:
            return "0x" + w[0]
    return None


def execution_from_logs(
    logs: Sequence[Mapping[str, Any]], message_id: str
) -> tuple[Execution, str] | None:
    """(execution state, destination tx hash) of `message_id` in destination logs, or None.

    The router's MessageExecuted means the receiver ran without reverting (the
    router reverts otherwise); an OffRamp's ExecutionStateChanged says 2 (SUCCESS)
    or 3 (FAILURE, which CCIP lets a person execute manually).
    """
    wanted = message_id.lower()
    for entry in logs:
        topics = [t.lower() for t in entry.get("topics") or []]
        if not topics:
            continue
        w = words(entry.get("data") or "0x")
        tx_hash = str(entry.get("transactionHash", "")).lower()
        if topics[0] == MESSAGE_EXECUTED and w and "0x" + w[0] == wanted:
            return Execution.SUCCESS, tx_hash
        if topics[0] == EXECUTION_STATE_CHANGED and len(topics) > 3 and topics[3] == wanted:
            state = int(w[1], 16) if len(w) > 1 else 0
            if state == 2:
                return Execution.SUCCESS, tx_hash
            if state == 3:
                return Execution.MANUAL_EXECUTION_NEEDED, tx_hash
            # 1 IN_PROGRESS, 0 UNTOUCHED: not decided yet
    return None


#: On another chain, the search for a message's execution starts this many blocks below
#: the destination's height at the first look (a message takes minutes, at least, to cross;
#: the observer records an execution as soon as it sees one).
DEST_BLOCK_MARGIN = 100


def execution_from_block(
    lane: Lane, send_block: int, dest_height: int | None, known: int | None = None
) -> int:
    """Where to search the destination's logs for a message's execution: from the send's
    block on a lane within one chain; else from where an earlier look started (`known`),
    or the destination's height less DEST_BLOCK_MARGIN."""
    if lane.dest_chain_id == lane.chain_id:
        return send_block
    if known is not None:
        return known
    return max(0, (dest_height or 0) - DEST_BLOCK_MARGIN)


def execution_topics(lane: Lane, message_id: str) -> tuple[str, list[Any]]:
    """(address, topics) of the eth_getLogs filter that finds the message's execution."""
    if lane.execution == "off_ramp":
        assert lane.off_ramp is not None
        return lane.off_ramp, [EXECUTION_STATE_CHANGED, None, None, message_id]
    return lane.dest_router, [MESSAGE_EXECUTED]


# ------------------------------------------------------------------ reaper


class Verdict(StrEnum):
    SENT = "sent"  # mined with a message id: attach it
    REVERTED = "reverted"  # mined and reverted: no message
    RELEASED = "released"  # provably never sent: the nonce went to another transaction
    STRANDED = "stranded"  # the chain cannot tell: a person must look
    DELIVERED = "delivered"  # already executed on the destination


def reap_verdict(
    *,
    state: str,
    receipt_status: int | None,
    message_id: str | None,
    tx_known: bool,
    nonce: int,
    mined_nonce: int | None,
    executed: bool = False,
    consumed_by_other: bool = False,
) -> Verdict:
    """What ccip_stranded_reaper does with an intent aged past the threshold.

    `receipt_status` is the send's receipt status (None: no receipt); `tx_known`
    says the hash is mined or pending; `mined_nonce` the sender's `latest` count
    (None: no client for the chain); `consumed_by_other` that the transaction that
    used the nonce was read from its block and is none of ours. Released only when
    the chain proves the transaction can never be mined: its nonce was used by
    another one. A lookup that found none of ours is no proof (a lagging or pruned
    receipt index): stranded, a person looks.
    """
    if receipt_status is not None:
        if receipt_status != 1:
            return Verdict.REVERTED
        if executed:
            return Verdict.DELIVERED
        if state in (IntentState.PENDING, IntentState.BROADCAST) and message_id is not None:
            return Verdict.SENT
        return Verdict.STRANDED  # sent but not delivered in time
    if not tx_known and mined_nonce is not None and nonce < mined_nonce and consumed_by_other:
        return Verdict.RELEASED
    return Verdict.STRANDED


# ------------------------------------------------------------------ drift


@dataclass(frozen=True, slots=True)
class LaneRegistry:
    """What a CCIP sidecar client reports for one lane."""

    router: str | None
    on_ramp: str | None = None
    off_ramps: tuple[str, ...] = ()
    #: token -> {"pool": address or "supported", "rate_limit": {...} | None}
    tokens: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def registry_from_json(body: Mapping[str, Any]) -> LaneRegistry:
    """The HTTP sidecar's JSON for one lane (docs/providers/ccip.md, "CCIP sidecar contract")."""
    tokens = body.get("tokens") or {}
    if not isinstance(tokens, dict):
        raise ValueError("tokens must be an object")
    return LaneRegistry(
        router=_lower(body.get("router")),
        on_ramp=_lower(body.get("on_ramp")),
        off_ramps=tuple(str(x).lower() for x in body.get("off_ramps") or ()),
        tokens={
            str(t).lower(): {
                "pool": _lower((v or {}).get("pool")) or "none",
                "rate_limit": (v or {}).get("rate_limit"),
            }
            for t, v in tokens.items()
        },
    )


def _lower(value: Any) -> str | None:
    return str(value).lower() if value is not None else None


def drift_checks(lane: Lane, seen: LaneRegistry) -> list[tuple[str, str, str]]:
    """(check_name, expected, observed) of every configured fact of a lane.

    Expected is what qtg is configured with (not a first sighting): a lane that
    disagrees from the start is drift too.
    """
    checks = [("router", lane.router, seen.router or "none")]
    if lane.on_ramp is not None:
        checks.append(("on_ramp", lane.on_ramp, seen.on_ramp or "none"))
    if lane.off_ramp is not None:
        checks.append(
            (
                "off_ramp",
                lane.off_ramp,
                lane.off_ramp if lane.off_ramp in seen.off_ramps else "none",
            )
        )
    for token, pool in sorted(lane.tokens.items()):
        observed = seen.tokens.get(token)
        checks.append((f"pool:{token}", pool, str(observed["pool"]) if observed else "none"))
        limit = lane.rate_limits.get(token)
        if limit is not None:
            got = (observed or {}).get("rate_limit") or {}
            checks.append(
                (
                    f"rate_limit:{token}",
                    _canonical(limit),
                    _canonical({k: str(v) for k, v in got.items()}) if got else "none",
                )
            )
    return checks


def _canonical(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"))
