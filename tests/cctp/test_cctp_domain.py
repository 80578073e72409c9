"""Pure CCTP rules (qtg/domain/cctp.py): settings, calldata, the V1 message, the API's answer."""

from __future__ import annotations

import json

import pytest

from qtg.config import ConfigError, Settings
from qtg.domain.cctp import (
    attestation_from_body,
    decode_message,
    deposit_for_burn_data,
    message_hash,
    parse_chains,
    receive_message_data,
    source_and_nonce,
)

A = "0x" + "aa" * 20
B = "0x" + "bb" * 20
C = "0x" + "cc" * 20


def _entry(chain_id: int = 1, domain: int = 0, **over) -> dict:
    return {
        "chain_id": chain_id,
        "domain": domain,
        "token_messenger": A,
        "message_transmitter": B,
        "usdc": C,
        **over,
    }


def _message(nonce: int = 7, amount: int = 1_500_000) -> str:
    header = (
        (0).to_bytes(4, "big")
        + (0).to_bytes(4, "big")
        + (3).to_bytes(4, "big")
        + nonce.to_bytes(8, "big")
        + bytes(12)
        + bytes.fromhex("aa" * 20)
        + bytes(12)
        + bytes.fromhex("bb" * 20)
        + bytes(32)
    )
    body = (
        (0).to_bytes(4, "big")
        + bytes(12)
        + bytes.fromhex("cc" * 20)
        + bytes(12)
        + bytes.fromhex("dd" * 20)
        + amount.to_bytes(32, "big")
        + bytes(12)
        + bytes.fromhex("ee" * 20)
    )
    return "0x" + (header + body).hex()


def test_chains_parse_by_chain_id_with_lowercase_addresses() -> None:
    chains = parse_chains(
        json.dumps([_entry(1, 0, usdc=C.upper().replace("0X", "0x")), _entry(8453, 6)])
    )
    assert sorted(chains) == [1, 8453]
    assert chains[8453].domain == 6 and chains[1].usdc == C
    assert parse_chains("") == {}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("{", "not JSON"),
        ('{"chain_id": 1}', "JSON list"),
        (json.dumps([_entry(0)]), "chain_id"),
        (json.dumps([_entry(domain=-1)]), "domain"),
        (json.dumps([_entry(domain=True)]), "domain"),
        (json.dumps([_entry(usdc="0x12")]), "usdc"),
        (json.dumps([_entry(1, 0), _entry(1, 2)]), "appears twice"),
        (json.dumps([_entry(1, 0), _entry(2, 0)]), "domain 0 appears twice"),
    ],
)
def test_a_bad_chain_list_names_the_entry_and_field(raw: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_chains(raw)
    with pytest.raises(ConfigError, match="MG_CCTP_CHAINS"):
        Settings.from_env({"MG_CCTP_CHAINS": raw})


def test_the_v1_burn_message_decodes_field_by_field() -> None:
    m = decode_message(_message())
    assert (m.version, m.source_domain, m.destination_domain, m.nonce) == (0, 0, 3, 7)
    assert (m.sender, m.recipient, m.destination_caller) == (A, B, "0x" + "00" * 20)
    assert (m.burn_token, m.mint_recipient, m.message_sender) == (
        C,
        "0x" + "dd" * 20,
        "0x" + "ee" * 20,
    )
    assert m.amount == 1_500_000
    with pytest.raises(ValueError, match="248 bytes"):
        decode_message(_message()[:-2])


def test_calldata_is_the_abi_encoding_of_circles_functions() -> None:
    from eth_abi import decode

    data = deposit_for_burn_data(5, 3, A, C)
    assert data[:10] == "0x6fd3504e"  # depositForBurn(uint256,uint32,bytes32,address)
    assert decode(["uint256", "uint32", "bytes32", "address"], bytes.fromhex(data[10:])) == (
        5,
        3,
        bytes(12) + bytes.fromhex("aa" * 20),
        C,
    )
    message, attestation = _message(), "0x" + "12" * 65
    data = receive_message_data(message, attestation)
    assert data[:10] == "0x57ecfd28"  # receiveMessage(bytes,bytes)
    assert decode(["bytes", "bytes"], bytes.fromhex(data[10:])) == (
        bytes.fromhex(message[2:]),
        bytes.fromhex(attestation[2:]),
    )


def test_the_used_nonce_key_is_keccak_of_packed_domain_and_nonce() -> None:
    from eth_utils import keccak

    assert (
        source_and_nonce(6, 9)
        == "0x" + keccak(bytes.fromhex("00000006" + "0000000000000009")).hex()
    )


def test_the_api_answer_counts_only_the_burns_own_signed_message() -> None:
    message = _message()
    signed = {
        "messages": [{"message": message, "attestation": "0xAB" + "12" * 64, "status": "complete"}]
    }
    found = attestation_from_body(signed, message)
    assert found is not None and found.attestation == "0xab" + "12" * 64
    pending = {
        "messages": [
            {"message": message, "attestation": "PENDING", "status": "pending_confirmations"}
        ]
    }
    assert attestation_from_body(pending, message).attestation is None  # type: ignore[union-attr]
    other = {
        "messages": [{"message": _message(nonce=8), "attestation": "0x12", "status": "complete"}]
    }
    assert attestation_from_body(other, message) is None  # another message's signature: never
    for body in (
        None,
        [],
        {},
        {"messages": "x"},
        {"messages": [{"message": "0x"}]},
        {"error": "x"},
    ):
        assert attestation_from_body(body, message) is None
    assert message_hash(message).startswith("0x") and len(message_hash(message)) == 66
