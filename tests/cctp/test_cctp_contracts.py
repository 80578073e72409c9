"""The test CCTP contracts keep Circle's V1 rules (issue 28): what the provider relies on.

A burn on A emits the V1 message (header and BurnMessage) qtg decodes; B's
transmitter mints only with the enabled attester's signature over
keccak256(message), marks usedNonces[keccak(sourceDomain, nonce)], and refuses
the same message a second time.
"""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES, wait_receipt

from cctp.local import (
    DOMAIN_A,
    DOMAIN_B,
    call,
    selector,
    send,
    set_up,
    sign_message,
    usdc_balance,
)
from qtg.domain.cctp import (
    address_word,
    decode_message,
    deposit_for_burn_data,
    message_from_logs,
    receive_message_data,
    source_and_nonce,
)

RECIPIENT = ADDRESSES[1]


def _burn(a, da, db, amount: int) -> str:
    send(a, da.usdc, "approve(address,uint256)", address_word(da.messenger), f"{amount:064x}")
    tx = a.call(
        "eth_sendTransaction",
        {
            "from": ADDRESSES[0],
            "to": da.messenger,
            "data": deposit_for_burn_data(amount, db.domain, RECIPIENT, da.usdc),
            "gas": "0x7a120",
        },
    )
    receipt = wait_receipt(a, tx)
    assert receipt["status"] == "0x1"
    message = message_from_logs(receipt["logs"], da.transmitter)
    assert message is not None
    return message


def _receive(b, db, message: str, attestation: str) -> dict:
    tx = b.call(
        "eth_sendTransaction",
        {
            "from": ADDRESSES[0],
            "to": db.transmitter,
            "data": receive_message_data(message, attestation),
            "gas": "0x7a120",
        },
    )
    return wait_receipt(b, tx)


def test_a_burn_is_minted_once_with_the_attesters_signature(chains) -> None:
    a, b = chains
    da, db = set_up(a, b, 10_000_000)
    message = _burn(a, da, db, 2_500_000)
    m = decode_message(message)
    assert (m.version, m.source_domain, m.destination_domain, m.nonce) == (0, DOMAIN_A, DOMAIN_B, 0)
    assert (m.sender, m.recipient) == (da.messenger, db.messenger)
    assert (m.burn_token, m.mint_recipient, m.amount) == (da.usdc, RECIPIENT.lower(), 2_500_000)
    assert m.message_sender == ADDRESSES[0].lower()
    assert usdc_balance(a, da, ADDRESSES[0]) == 7_500_000  # burned on A
    key = source_and_nonce(DOMAIN_A, 0)[2:]
    assert call(b, db.transmitter, "usedNonces(bytes32)", key) == 0
    receipt = _receive(b, db, message, sign_message(message))
    assert receipt["status"] == "0x1"
    assert usdc_balance(b, db, RECIPIENT) == 2_500_000
    assert call(b, db.transmitter, "usedNonces(bytes32)", key) == 1
    again = _receive(b, db, message, sign_message(message))
    assert again["status"] == "0x0"  # the nonce is used: no second mint
    assert usdc_balance(b, db, RECIPIENT) == 2_500_000


@pytest.mark.parametrize(
    "attestation",
    [
        "0x" + "00" * 65,
        "another key",
        "0x" + "11" * 64,  # wrong length
    ],
)
def test_a_mint_without_the_attesters_signature_reverts(chains, attestation) -> None:
    a, b = chains
    da, db = set_up(a, b, 10_000_000)
    message = _burn(a, da, db, 1_000_000)
    if attestation == "another key":  # a real signature over this message, by a non-attester
        attestation = sign_message(message, "0x" + "b2" * 32)
    assert _receive(b, db, message, attestation)["status"] == "0x0"
    assert usdc_balance(b, db, RECIPIENT) == 0


def test_a_tampered_message_is_refused(chains) -> None:
    a, b = chains
    da, db = set_up(a, b, 10_000_000)
    message = _burn(a, da, db, 1_000_000)
    signature = sign_message(message)
    body_amount = 2 + 2 * (116 + 68)  # hex offset of the amount word
    tampered = message[:body_amount] + f"{9_000_000:064x}" + message[body_amount + 64 :]
    assert decode_message(tampered).amount == 9_000_000
    assert _receive(b, db, tampered, signature)["status"] == "0x0"
    assert usdc_balance(b, db, RECIPIENT) == 0
    assert selector("receiveMessage(bytes,bytes)") == receive_message_data("0x", "0x")[2:10]
