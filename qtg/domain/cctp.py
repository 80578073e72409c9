"""Pure CCTP rules (issue 28): chains, calldata, the V1 message, the attestation API's answer.

No I/O: the `cctp` provider reads the chains and Circle's attestation API and
feeds the facts here, so what decides "burned", "attested", "minted" can be
read and tested on its own. The message layout is Circle's CCTP V1
(MessageTransmitter `Message` and TokenMessenger `BurnMessage`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_hash.auto import keccak

from qtg.domain.errors import ConfigError
from qtg.domain.evm import address_word, is_address

CHAINS_ENV = "MG_CCTP_CHAINS"


def _selector(signature: str) -> str:
    return keccak(signature.encode())[:4].hex()


def _topic(signature: str) -> str:
    return "0x" + keccak(signature.encode()).hex()


DEPOSIT_FOR_BURN = _selector("depositForBurn(uint256,uint32,bytes32,address)")
RECEIVE_MESSAGE = _selector("receiveMessage(bytes,bytes)")
USED_NONCES = _selector("usedNonces(bytes32)")
LOCAL_DOMAIN = _selector("localDomain()")
#: MessageTransmitter: MessageSent(bytes message)
MESSAGE_SENT = _topic("MessageSent(bytes)")
#: TokenMessenger (TokenMinter in Circle's split):
#: MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken)
MINT_AND_WITHDRAW = _topic("MintAndWithdraw(address,uint256,address)")
#: MessageTransmitter:
#: MessageReceived(address indexed caller, uint32, uint64 indexed nonce, bytes32, bytes)
MESSAGE_RECEIVED = _topic("MessageReceived(address,uint32,uint64,bytes32,bytes)")
#: V1 message header: version, source, destination (u32 each), nonce (u64), sender,
#: recipient, destinationCaller (bytes32 each)
HEADER_BYTES = 116
BURN_BODY_BYTES = 132


@dataclass(frozen=True)
class Chain:
    """One chain's CCTP deployment (MG_CCTP_CHAINS entry)."""

    chain_id: int
    domain: int
    token_messenger: str
    message_transmitter: str
    usdc: str


def _chain_error(index: int, what: str) -> ConfigError:
    return ConfigError(f"{CHAINS_ENV}: entry {index}: {what}")


def parse_chains(raw: str) -> dict[int, Chain]:
    """MG_CCTP_CHAINS: a JSON list of {chain_id, domain, token_messenger,
    message_transmitter, usdc}, by chain id. Empty: no chains. A bad entry stops
    start-up naming the entry and the field."""
    if not raw.strip():
        return {}
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{CHAINS_ENV}: not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{CHAINS_ENV}: must be a JSON list of chains")
    out: dict[int, Chain] = {}
    domains: set[int] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _chain_error(i, "must be an object")
        chain_id, domain = item.get("chain_id"), item.get("domain")
        if not isinstance(chain_id, int) or isinstance(chain_id, bool) or chain_id <= 0:
            raise _chain_error(i, f"chain_id {chain_id!r} is not a positive integer")
        if not isinstance(domain, int) or isinstance(domain, bool) or not 0 <= domain < 2**32:
            raise _chain_error(i, f"domain {domain!r} is not a uint32")
        if chain_id in out:
            raise _chain_error(i, f"chain_id {chain_id} appears twice")
        if domain in domains:
            raise _chain_error(i, f"domain {domain} appears twice")
        addresses = {}
        for key in ("token_messenger", "message_transmitter", "usdc"):
            value = item.get(key)
            if not is_address(value):
                raise _chain_error(i, f"{key} {value!r} is not an address")
            addresses[key] = str(value).lower()
        domains.add(domain)
        out[chain_id] = Chain(chain_id=chain_id, domain=domain, **addresses)
    return out


def chain_for_domain(chains: Mapping[int, Chain], domain: int) -> Chain | None:
    return next((c for c in chains.values() if c.domain == domain), None)


# ---- calldata
def _word(value: int) -> str:
    return f"{value:064x}"


def deposit_for_burn_data(amount: int, destination_domain: int, recipient: str, token: str) -> str:
    return (
        "0x"
        + DEPOSIT_FOR_BURN
        + _word(amount)
        + _word(destination_domain)
        + address_word(recipient)
        + address_word(token)
    )


def receive_message_data(message: str, attestation: str) -> str:
    """receiveMessage(bytes message, bytes attestation), ABI-encoded."""
    m = bytes.fromhex(message.removeprefix("0x"))
    a = bytes.fromhex(attestation.removeprefix("0x"))

    def tail(b: bytes) -> str:
        padded = b + b"\0" * (-len(b) % 32)
        return _word(len(b)) + padded.hex()

    first = tail(m)
    return "0x" + RECEIVE_MESSAGE + _word(64) + _word(64 + len(first) // 2) + first + tail(a)


def source_and_nonce(source_domain: int, nonce: int) -> str:
    """MessageTransmitter's usedNonces key: keccak256(abi.encodePacked(uint32, uint64))."""
    return "0x" + keccak(source_domain.to_bytes(4, "big") + nonce.to_bytes(8, "big")).hex()


def used_nonces_data(source_domain: int, nonce: int) -> str:
    return "0x" + USED_NONCES + source_and_nonce(source_domain, nonce)[2:]


# ---- the V1 message
@dataclass(frozen=True)
class BurnMessage:
    """A decoded V1 Message carrying a BurnMessage body."""

    version: int
    source_domain: int
    destination_domain: int
    nonce: int
    sender: str  # the source TokenMessenger
    recipient: str  # the destination TokenMessenger
    destination_caller: str
    burn_token: str
    mint_recipient: str
    amount: int
    message_sender: str  # who burned

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "sourceDomain": str(self.source_domain),
            "destinationDomain": str(self.destination_domain),
            "nonce": str(self.nonce),
            "sender": self.sender,
            "recipient": self.recipient,
            "destinationCaller": self.destination_caller,
            "messageBody": {
                "burnToken": self.burn_token,
                "mintRecipient": self.mint_recipient,
                "amount": str(self.amount),
                "messageSender": self.message_sender,
            },
        }


def _addr(word: bytes) -> str:
    return "0x" + word[12:].hex()


def decode_message(message: str) -> BurnMessage:
    """Decode a V1 burn message (hex); ValueError when it is not one."""
    raw = bytes.fromhex(message.removeprefix("0x"))
    if len(raw) != HEADER_BYTES + BURN_BODY_BYTES:
        raise ValueError(
            f"a V1 burn message is {HEADER_BYTES + BURN_BODY_BYTES} bytes, not {len(raw)}"
        )
    body = raw[HEADER_BYTES:]
    return BurnMessage(
        version=int.from_bytes(raw[0:4], "big"),
        source_domain=int.from_bytes(raw[4:8], "big"),
        destination_domain=int.from_bytes(raw[8:12], "big"),
        nonce=int.from_bytes(raw[12:20], "big"),
        sender=_addr(raw[20:52]),
        recipient=_addr(raw[52:84]),
        destination_caller=_addr(raw[84:116]),
        burn_token=_addr(body[4:36]),
        mint_recipient=_addr(body[36:68]),
        amount=int.from_bytes(body[68:100], "big"),
        message_sender=_addr(body[100:132]),
    )


def message_hash(message: str) -> str:
    return "0x" + keccak(bytes.fromhex(message.removeprefix("0x"))).hex()


def _abi_bytes(data: str) -> str:
    """The `bytes` of an event whose only non-indexed field is `bytes` (MessageSent)."""
    raw = bytes.fromhex(data.removeprefix("0x"))
    length = int.from_bytes(raw[32:64], "big")
    return "0x" + raw[64 : 64 + length].hex()


def message_from_logs(logs: Sequence[Mapping[str, Any]], transmitter: str) -> str | None:
    """The MessageSent message of a burn's receipt, from the configured transmitter only."""
    for log in logs:
        topics = log.get("topics") or []
        if (
            topics
            and topics[0].lower() == MESSAGE_SENT
            and str(log.get("address", "")).lower() == transmitter.lower()
        ):
            return _abi_bytes(log["data"])
    return None


def minted_from_logs(
    logs: Sequence[Mapping[str, Any]], messenger: str, recipient: str, token: str
) -> int | None:
    """The amount a MintAndWithdraw log of `messenger` minted to `recipient` in `token`."""
    for log in logs:
        topics = [t.lower() for t in log.get("topics") or []]
        if (
            len(topics) == 3
            and topics[0] == MINT_AND_WITHDRAW
            and str(log.get("address", "")).lower() == messenger.lower()
            and topics[1] == "0x" + address_word(recipient)
            and topics[2] == "0x" + address_word(token)
        ):
            return int(log["data"], 16)
    return None


# ---- the attestation API (GET /v2/messages/{sourceDomain}?transactionHash=)
@dataclass(frozen=True)
class Attested:
    """What the API says about one message: `attestation` None while pending."""

    message: str
    attestation: str | None
    status: str


def attestation_from_body(body: Any, expected_message: str | None) -> Attested | None:
    """Circle's documented response: {"messages": [{"message", "attestation",
    "eventNonce", "status", …}]}, "attestation" "PENDING" and status
    "pending_confirmations" until it is signed. None when the body names no
    message (yet). When the burn's own MessageSent is known, only that message
    counts: an API answer for another message is never taken."""
    if not isinstance(body, Mapping):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for item in messages:
        if not isinstance(item, Mapping):
            continue
        message = item.get("message")
        if not isinstance(message, str) or not message.startswith("0x") or len(message) <= 2:
            continue
        if expected_message is not None and message.lower() != expected_message.lower():
            continue
        attestation = item.get("attestation")
        status = str(item.get("status") or "")
        signed = (
            isinstance(attestation, str)
            and attestation.startswith("0x")
            and len(attestation) > 2
            and status in ("complete", "")
        )
        return Attested(
            message=message.lower(),
            attestation=attestation.lower() if signed else None,  # type: ignore[union-attr]
            status=status or ("complete" if signed else "pending_confirmations"),
        )
    return None
