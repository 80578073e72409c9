"""Pure Stargate rules (qtg/domain/stargate.py): the chain list stops start-up naming the
bad field; a packet whose GUID is not its header's is refused."""

from __future__ import annotations

import json

import pytest

from qtg.domain.errors import ConfigError
from qtg.domain.stargate import (
    OFT_SENT,
    PACKET_SENT,
    decode_packet,
    guid_of,
    parse_chains,
    sent_from_logs,
)

POOL, ENDPOINT, TOKEN = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20


def _entry(**over: object) -> dict:
    return {"chain_id": 1, "eid": 30101, "pool": POOL, "endpoint": ENDPOINT, "token": TOKEN, **over}


def test_parse_chains_reads_each_entry_by_chain_id() -> None:
    chains = parse_chains(json.dumps([_entry(), _entry(chain_id=42161, eid=30110)]))
    assert sorted(chains) == [1, 42161]
    assert (chains[42161].eid, chains[42161].pool) == (30110, POOL)
    assert parse_chains("  ") == {}


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ("[1]", "entry 0: must be an object"),
        (json.dumps([_entry(chain_id=0)]), "chain_id 0"),
        (json.dumps([_entry(eid=0)]), "eid 0"),
        (json.dumps([_entry(), _entry(eid=30110)]), "chain_id 1 appears twice"),
        (json.dumps([_entry(), _entry(chain_id=2)]), "eid 30101 appears twice"),
        (json.dumps([_entry(pool="0x12")]), "pool '0x12'"),
        ("{", "not JSON"),
        ("{}", "JSON list"),
    ],
)
def test_a_bad_chain_list_names_what_is_wrong(entries: str, named: str) -> None:
    with pytest.raises(ConfigError, match="MG_STARGATE_CHAINS") as err:
        parse_chains(entries)
    assert named in str(err.value)


def _parts(nonce: int, sender: str, receiver: str, to: str) -> tuple[bytes, str, bytes]:
    """A PacketV1's header (without its GUID), its GUID, and a taxi message of 5 tokens."""
    header = (
        b"\x01"
        + nonce.to_bytes(8, "big")
        + (30101).to_bytes(4, "big")
        + bytes(12)
        + bytes.fromhex(sender[2:])
        + (30110).to_bytes(4, "big")
        + bytes(12)
        + bytes.fromhex(receiver[2:])
    )
    message = bytes(12) + bytes.fromhex(to[2:]) + (5_000_000).to_bytes(8, "big")
    return header, guid_of(nonce, 30101, sender, 30110, receiver), message


def test_a_packet_is_decoded_and_its_guid_checked() -> None:
    header, guid, message = _parts(7, POOL, ENDPOINT, TOKEN)
    packet = decode_packet("0x" + (header + bytes.fromhex(guid[2:]) + message).hex())
    assert (packet.nonce, packet.guid, packet.to, packet.amount) == (7, guid, TOKEN, 5_000_000)
    forged = "0x" + (header + bytes(32) + message).hex()
    with pytest.raises(ValueError, match="guid"):
        decode_packet(forged)
    with pytest.raises(ValueError, match="bytes"):
        decode_packet("0x" + (header + bytes.fromhex(guid[2:])).hex())


def _packet_log(endpoint: str, sender: str, guid_nonce: int = 1) -> tuple[dict, str]:
    """A PacketSent log of `endpoint` for a packet from `sender` (pool) to B's pool."""
    header, guid, message = _parts(guid_nonce, sender, "0x" + "44" * 20, TOKEN)
    packet = header + bytes.fromhex(guid[2:]) + message
    padded = packet + bytes(-len(packet) % 32)
    data = (
        (96).to_bytes(32, "big")
        + (96 + 32 + len(padded)).to_bytes(32, "big")
        + bytes(12)
        + bytes.fromhex(endpoint[2:])
        + len(packet).to_bytes(32, "big")
        + padded
        + bytes(32)
    )
    return {"address": endpoint, "topics": [PACKET_SENT], "data": "0x" + data.hex()}, guid


def _oft_sent_log(pool: str, guid: str) -> dict:
    words = [30110, 5_000_000, 5_000_000]
    return {
        "address": pool,
        "topics": [OFT_SENT, guid, "0x" + "00" * 12 + "55" * 20],
        "data": "0x" + "".join(f"{w:064x}" for w in words),
    }


def test_a_send_counts_only_from_the_configured_pool_and_endpoint() -> None:
    [source] = parse_chains(json.dumps([_entry()])).values()
    packet, guid = _packet_log(ENDPOINT, POOL)
    sent = sent_from_logs([packet, _oft_sent_log(POOL, guid)], source)
    assert sent is not None and (sent.packet.guid, sent.amount_received) == (guid, 5_000_000)
    assert sent.sender == "0x" + "55" * 20
    other = "0x" + "66" * 20
    assert sent_from_logs([packet], source) is None  # no OFTSent: no send
    assert sent_from_logs([_oft_sent_log(POOL, guid)], source) is None  # no packet
    assert sent_from_logs([packet, _oft_sent_log(other, guid)], source) is None  # another pool
    foreign, foreign_guid = _packet_log(other, POOL)  # another endpoint's packet
    assert sent_from_logs([foreign, _oft_sent_log(POOL, foreign_guid)], source) is None
    spoofed, spoofed_guid = _packet_log(ENDPOINT, other)  # our endpoint, another sender
    assert sent_from_logs([spoofed, _oft_sent_log(POOL, spoofed_guid)], source) is None
    mismatch, _ = _packet_log(ENDPOINT, POOL, guid_nonce=2)  # OFTSent of another guid
    assert sent_from_logs([mismatch, _oft_sent_log(POOL, guid)], source) is None
