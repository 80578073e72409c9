"""Pure Stargate rules (qtg/domain/stargate.py): the chain list stops start-up naming the
bad field; a packet whose GUID is not its header's is refused."""

from __future__ import annotations

import json

import pytest

from qtg.domain.errors import ConfigError
from qtg.domain.stargate import decode_packet, guid_of, parse_chains

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


def test_a_packet_is_decoded_and_its_guid_checked() -> None:
    sender, receiver, to = POOL, ENDPOINT, TOKEN
    guid = guid_of(7, 30101, sender, 30110, receiver)
    header = (
        b"\x01"
        + (7).to_bytes(8, "big")
        + (30101).to_bytes(4, "big")
        + bytes(12)
        + bytes.fromhex(sender[2:])
        + (30110).to_bytes(4, "big")
        + bytes(12)
        + bytes.fromhex(receiver[2:])
    )
    message = bytes(12) + bytes.fromhex(to[2:]) + (5_000_000).to_bytes(8, "big")
    packet = decode_packet("0x" + (header + bytes.fromhex(guid[2:]) + message).hex())
    assert (packet.nonce, packet.guid, packet.to, packet.amount) == (7, guid, to, 5_000_000)
    forged = "0x" + (header + bytes(32) + message).hex()
    with pytest.raises(ValueError, match="guid"):
        decode_packet(forged)
    with pytest.raises(ValueError, match="bytes"):
        decode_packet("0x" + (header + bytes.fromhex(guid[2:])).hex())
