"""Pure Stargate V2 rules (issue 46): chains, calldata, the LayerZero V2 packet, the events.

No I/O: the `stargate` provider reads both chains and feeds the facts here, so
what decides "sent" (the pool's OFTSent and the endpoint's PacketSent in the
send's receipt, joined by the LayerZero GUID) and "delivered" (the destination
pool's OFTReceived of that GUID, with the token's Transfer to the recipient in
the same receipt) can be read and tested on its own. Shapes: Stargate V2's
IStargate/IOFT (SendParam, MessagingFee, OFTReceipt) and LayerZero V2's
PacketV1Codec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_hash.auto import keccak

from qtg.domain.ccip import encode
from qtg.domain.cctp import _selector, _topic
from qtg.domain.errors import ConfigError
from qtg.domain.evm import address_word, is_address

CHAINS_ENV = "MG_STARGATE_CHAINS"


#: SendParam{dstEid, to, amountLD, minAmountLD, extraOptions, composeMsg, oftCmd}
SEND_PARAM = "(uint32,bytes32,uint256,uint256,bytes,bytes,bytes)"
SEND = _selector(f"send({SEND_PARAM},(uint256,uint256),address)")
QUOTE_SEND = _selector(f"quoteSend({SEND_PARAM},bool)")
QUOTE_OFT = _selector(f"quoteOFT({SEND_PARAM})")
#: IOFT: OFTSent(bytes32 indexed guid, uint32 dstEid, address indexed from, uint256, uint256)
OFT_SENT = _topic("OFTSent(bytes32,uint32,address,uint256,uint256)")
#: IOFT: OFTReceived(bytes32 indexed guid, uint32 srcEid, address indexed to, uint256)
OFT_RECEIVED = _topic("OFTReceived(bytes32,uint32,address,uint256)")
#: EndpointV2: PacketSent(bytes encodedPayload, bytes options, address sendLibrary)
PACKET_SENT = _topic("PacketSent(bytes,bytes,address)")
#: ERC-20 Transfer(address indexed from, address indexed to, uint256 value)
TRANSFER = _topic("Transfer(address,address,uint256)")
#: PacketV1Codec header: version u8 | nonce u64 | srcEid u32 | sender b32 | dstEid u32 |
#: receiver b32 | guid b32, then the message
PACKET_HEADER_BYTES = 113
#: Stargate's taxi message here: to b32 | amountSD u64 (OFTMsgCodec without compose)
MESSAGE_BYTES = 40


@dataclass(frozen=True)
class Chain:
    """One chain's Stargate V2 deployment (MG_STARGATE_CHAINS entry)."""

    chain_id: int
    eid: int
    pool: str
    endpoint: str
    token: str


def _chain_error(index: int, what: str) -> ConfigError:
    return ConfigError(f"{CHAINS_ENV}: entry {index}: {what}")


def parse_chains(raw: str) -> dict[int, Chain]:
    """MG_STARGATE_CHAINS: a JSON list of {chain_id, eid, pool, endpoint, token}, by chain
    id. Empty: no chains. A bad entry stops start-up naming the entry and the field."""
    if not raw.strip():
        return {}
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{CHAINS_ENV}: not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{CHAINS_ENV}: must be a JSON list of chains")
    out: dict[int, Chain] = {}
    eids: set[int] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _chain_error(i, "must be an object")
        chain_id, eid = item.get("chain_id"), item.get("eid")
        if not isinstance(chain_id, int) or isinstance(chain_id, bool) or chain_id <= 0:
            raise _chain_error(i, f"chain_id {chain_id!r} is not a positive integer")
        if not isinstance(eid, int) or isinstance(eid, bool) or not 0 < eid < 2**32:
            raise _chain_error(i, f"eid {eid!r} is not a non-zero uint32")
        if chain_id in out:
            raise _chain_error(i, f"chain_id {chain_id} appears twice")
        if eid in eids:
            raise _chain_error(i, f"eid {eid} appears twice")
        addresses = {}
        for key in ("pool", "endpoint", "token"):
            value = item.get(key)
            if not is_address(value):
                raise _chain_error(i, f"{key} {value!r} is not an address")
            addresses[key] = str(value).lower()
        eids.add(eid)
        out[chain_id] = Chain(chain_id=chain_id, eid=eid, **addresses)
    return out


def chain_for_eid(chains: Mapping[int, Chain], eid: int) -> Chain | None:
    return next((c for c in chains.values() if c.eid == eid), None)


# ---- calldata
def send_param(dst_eid: int, to: str, amount: int, min_amount: int) -> tuple[Any, ...]:
    """A taxi SendParam: no extra options, no compose message, no oftCmd."""
    return (dst_eid, bytes.fromhex(address_word(to)), amount, min_amount, b"", b"", b"")


def quote_oft_data(param: tuple[Any, ...]) -> str:
    return "0x" + QUOTE_OFT + encode([SEND_PARAM], [param]).hex()


def quote_send_data(param: tuple[Any, ...]) -> str:
    return "0x" + QUOTE_SEND + encode([SEND_PARAM, "bool"], [param, False]).hex()


def send_data(param: tuple[Any, ...], native_fee: int, refund: str) -> str:
    """send(SendParam, MessagingFee{nativeFee, lzTokenFee 0}, refundAddress)."""
    args = encode([SEND_PARAM, "(uint256,uint256)", "address"], [param, (native_fee, 0), refund])
    return "0x" + SEND + args.hex()


def _words(raw: str) -> list[int]:
    data = bytes.fromhex(raw.removeprefix("0x"))
    return [int.from_bytes(data[i : i + 32], "big") for i in range(0, len(data) - 31, 32)]


def native_fee_from(raw: str) -> int:
    """quoteSend's MessagingFee{nativeFee, lzTokenFee}: the native fee."""
    words = _words(raw)
    if len(words) != 2:
        raise ValueError(f"quoteSend answered {len(words)} words, not a MessagingFee")
    return words[0]


def oft_receipt_from(raw: str) -> tuple[int, int]:
    """quoteOFT's OFTReceipt{amountSentLD, amountReceivedLD}: the last two head words
    (after OFTLimit's two and the fee details' offset)."""
    words = _words(raw)
    if len(words) < 5:
        raise ValueError(
            "quoteOFT's answer is too short for (OFTLimit, OFTFeeDetail[], OFTReceipt)"
        )
    return words[3], words[4]


# ---- the LayerZero V2 packet
@dataclass(frozen=True)
class Packet:
    """A decoded PacketV1 carrying a taxi message."""

    nonce: int
    src_eid: int
    sender: str  # the source pool
    dst_eid: int
    receiver: str  # the destination pool
    guid: str
    to: str
    amount: int  # amountSD, equal to amountLD here (shared decimals = local decimals)


def guid_of(nonce: int, src_eid: int, sender: str, dst_eid: int, receiver: str) -> str:
    """LayerZero V2's GUID: keccak256(abi.encodePacked(nonce, srcEid, sender, dstEid, receiver))."""
    packed = (
        nonce.to_bytes(8, "big")
        + src_eid.to_bytes(4, "big")
        + bytes.fromhex(address_word(sender))
        + dst_eid.to_bytes(4, "big")
        + bytes.fromhex(address_word(receiver))
    )
    return "0x" + keccak(packed).hex()


def _addr(word: bytes) -> str:
    return "0x" + word[12:].hex()


def decode_packet(encoded: str) -> Packet:
    """Decode a PacketV1 (hex); ValueError when it is not one with a taxi message, or when
    its GUID is not the one its header makes."""
    raw = bytes.fromhex(encoded.removeprefix("0x"))
    if len(raw) != PACKET_HEADER_BYTES + MESSAGE_BYTES or raw[0] != 1:
        raise ValueError(
            f"a PacketV1 taxi packet is {PACKET_HEADER_BYTES + MESSAGE_BYTES} bytes of version 1"
        )
    message = raw[PACKET_HEADER_BYTES:]
    packet = Packet(
        nonce=int.from_bytes(raw[1:9], "big"),
        src_eid=int.from_bytes(raw[9:13], "big"),
        sender=_addr(raw[13:45]),
        dst_eid=int.from_bytes(raw[45:49], "big"),
        receiver=_addr(raw[49:81]),
        guid="0x" + raw[81:113].hex(),
        to=_addr(message[0:32]),
        amount=int.from_bytes(message[32:40], "big"),
    )
    made = guid_of(packet.nonce, packet.src_eid, packet.sender, packet.dst_eid, packet.receiver)
    if made != packet.guid:
        raise ValueError(f"the packet's guid {packet.guid} is not its header's {made}")
    return packet


def message_of(encoded: str) -> str:
    """The packet's message (what the endpoint's payload hash covers after the GUID)."""
    return "0x" + bytes.fromhex(encoded.removeprefix("0x"))[PACKET_HEADER_BYTES:].hex()


def _first_bytes(data: str) -> str:
    """The first `bytes` field of an event's data (PacketSent's encodedPayload)."""
    raw = bytes.fromhex(data.removeprefix("0x"))
    offset = int.from_bytes(raw[0:32], "big")
    length = int.from_bytes(raw[offset : offset + 32], "big")
    return "0x" + raw[offset + 32 : offset + 32 + length].hex()


def _of(log: Mapping[str, Any], address: str, topic: str) -> list[str] | None:
    topics = [str(t).lower() for t in log.get("topics") or []]
    if topics and topics[0] == topic and str(log.get("address", "")).lower() == address.lower():
        return topics
    return None


@dataclass(frozen=True)
class Sent:
    """What a mined send's receipt proves: the packet, and what the pool took and promised."""

    packet: Packet
    sender: str  # who paid (OFTSent's fromAddress)
    amount_sent: int
    amount_received: int


def sent_from_logs(logs: Sequence[Mapping[str, Any]], source: Chain) -> Sent | None:
    """The send's OFTSent (of the configured pool) and PacketSent (of the configured
    endpoint, from that pool), joined by GUID; None when either is missing."""
    packets = []
    for log in logs:
        if _of(log, source.endpoint, PACKET_SENT) is not None:
            try:
                packet = decode_packet(_first_bytes(log["data"]))
            except ValueError:
                continue
            if packet.sender == source.pool and packet.src_eid == source.eid:
                packets.append(packet)
    for log in logs:
        topics = _of(log, source.pool, OFT_SENT)
        if topics is None or len(topics) != 3:
            continue
        words = _words(log["data"])
        for packet in packets:
            if packet.guid == topics[1] and len(words) == 3 and words[0] == packet.dst_eid:
                return Sent(packet, "0x" + topics[2][26:], words[1], words[2])
    return None


def received_from_logs(
    logs: Sequence[Mapping[str, Any]], dest: Chain, guid: str
) -> tuple[str, int] | None:
    """The destination pool's OFTReceived of `guid`: (toAddress, amountReceivedLD)."""
    for log in logs:
        topics = _of(log, dest.pool, OFT_RECEIVED)
        if topics is not None and len(topics) == 3 and topics[1] == guid.lower():
            return "0x" + topics[2][26:], _words(log["data"])[1]
    return None


def transferred(logs: Sequence[Mapping[str, Any]], token: str, source: str, to: str) -> int:
    """What `token` Transfer logs moved from `source` to `to` in one receipt."""
    total = 0
    for log in logs:
        topics = _of(log, token, TRANSFER)
        if (
            topics is not None
            and len(topics) == 3
            and topics[1] == "0x" + address_word(source)
            and topics[2] == "0x" + address_word(to)
        ):
            total += int(log["data"], 16)
    return total
