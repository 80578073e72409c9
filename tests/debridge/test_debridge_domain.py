"""The pure deBridge rules (qtg/domain/debridge.py): settings, the Order's encoding, the
status API's answer, and what counts as a fulfilment or a refund in a receipt."""

from __future__ import annotations

import json

import pytest

from qtg.domain.debridge import (
    CLAIMED_ORDER_CANCEL,
    FULFILLED_ORDER,
    TRANSFER,
    Order,
    Refund,
    decode_order,
    fulfilled_in_logs,
    order_id,
    parse_chains,
    refund_from_logs,
    refund_problem,
    state_from_body,
)
from qtg.domain.errors import ConfigError
from qtg.domain.evm import address_word

SRC, DST, TOKEN, RECEIVER = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20, "0x" + "44" * 20
ORDER = Order(
    maker_order_nonce=3,
    maker_src="0x" + "55" * 20,
    give_chain_id=31337,
    give_token="0x" + "66" * 20,
    give_amount=1_010_000,
    take_chain_id=31338,
    take_token=TOKEN,
    take_amount=1_000_000,
    receiver_dst=RECEIVER,
    give_patch_authority_src="0x" + "55" * 20,
    order_authority_address_dst="0x" + "55" * 20,
    allowed_taker_dst="0x",
    allowed_cancel_beneficiary_src="0x" + "55" * 20,
    external_call="0x",
)


def _chain(**over) -> dict:
    return {"chain_id": 1, "dln_source": SRC, "dln_destination": DST,
            "tokens": {"usdc": TOKEN}, **over}  # fmt: skip


def test_chains_parse_and_a_bad_entry_names_itself() -> None:
    chains = parse_chains(json.dumps([_chain(), _chain(chain_id=2)]))
    assert chains[1].tokens == {"USDC": TOKEN} and chains[2].dln_destination == DST
    assert parse_chains("  ") == {}
    for raw, words in [
        ("[", "not JSON"),
        ("{}", "JSON list"),
        (json.dumps([_chain(chain_id=0)]), "entry 0: chain_id 0"),
        (json.dumps([_chain(), _chain()]), "entry 1: chain_id 1 appears twice"),
        (json.dumps([_chain(dln_source="0x12")]), "entry 0: dln_source"),
        (json.dumps([_chain(tokens={})]), "entry 0: tokens"),
        (json.dumps([_chain(tokens={"USDC": "nope"})]), "entry 0: tokens.USDC"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_chains(raw)


def test_an_order_round_trips_and_its_id_is_the_hash_of_its_encoding() -> None:
    assert decode_order(ORDER.encoded()) == ORDER
    assert order_id(ORDER) != order_id(Order(**{**ORDER.__dict__, "take_amount": 1}))
    with pytest.raises(ValueError, match="not an ABI-encoded DLN Order"):
        decode_order("0x1234")


@pytest.mark.parametrize(
    ("body", "state"),
    [
        ({"orderId": {"stringValue": "0x1"}, "state": "Fulfilled"}, "Fulfilled"),
        ({"status": "ClaimedOrderCancel"}, "ClaimedOrderCancel"),
        ({"state": "Paid!"}, None),  # not a DLN state
        ({"state": 1}, None),
        (["Fulfilled"], None),
    ],
)
def test_the_status_api_answer_is_read_only_for_a_known_state(body, state) -> None:
    assert state_from_body(body) == state


def _log(address: str, topics: list[str], data: str) -> dict:
    return {"address": address, "topics": topics, "data": data}


def _fulfilled_log(oid: str) -> dict:
    from eth_abi import encode

    from qtg.domain.debridge import ORDER as ORDER_TYPE

    data = encode(
        [ORDER_TYPE, "bytes32", "address", "address"],
        [ORDER.as_tuple(), bytes.fromhex(oid[2:]), DST, DST],
    )
    return _log(DST, [FULFILLED_ORDER], "0x" + data.hex())


def _transfer(token: str, to: str, amount: int) -> dict:
    return _log(token, [TRANSFER, "0x" + address_word(DST), "0x" + address_word(to)],
                f"0x{amount:064x}")  # fmt: skip


def test_a_fulfilment_needs_the_event_of_this_id_and_the_payment_to_the_receiver() -> None:
    oid = order_id(ORDER)
    paid = _transfer(TOKEN, RECEIVER, 1_000_000)
    assert fulfilled_in_logs([paid, _fulfilled_log(oid)], DST, ORDER, oid)
    assert not fulfilled_in_logs([_fulfilled_log(oid)], DST, ORDER, oid)  # nobody was paid
    assert not fulfilled_in_logs([paid, _fulfilled_log("0x" + "ab" * 32)], DST, ORDER, oid)
    short = _transfer(TOKEN, RECEIVER, 999_999)
    assert not fulfilled_in_logs([short, _fulfilled_log(oid)], DST, ORDER, oid)
    elsewhere = _transfer(TOKEN, "0x" + "99" * 20, 1_000_000)
    assert not fulfilled_in_logs([elsewhere, _fulfilled_log(oid)], DST, ORDER, oid)
    fake = {**_fulfilled_log(oid), "address": "0x" + "98" * 20}  # not the configured contract
    assert not fulfilled_in_logs([paid, fake], DST, ORDER, oid)


def test_a_refund_is_the_configured_sources_claimed_order_cancel_of_this_id() -> None:
    oid = order_id(ORDER)
    data = "0x" + oid[2:] + address_word(RECEIVER) + f"{1_010_000:064x}" + address_word(TOKEN)
    refund = refund_from_logs([_log(SRC, [CLAIMED_ORDER_CANCEL], data)], SRC, oid)
    assert refund is not None and (refund.paid_amount, refund.beneficiary) == (1_010_000, RECEIVER)
    assert refund_from_logs([_log(DST, [CLAIMED_ORDER_CANCEL], data)], SRC, oid) is None
    assert refund_from_logs([_log(SRC, [CLAIMED_ORDER_CANCEL], data)], SRC, "0x" + "0" * 64) is None


SIGNER = "0x" + "55" * 20


@pytest.mark.parametrize(
    ("refund", "why"),
    [
        (Refund("0x01", SIGNER, 1_010_000, "0x" + "66" * 20), None),
        (Refund("0x01", "0x" + "77" * 20, 1_010_000, "0x" + "66" * 20), "beneficiary"),
        (Refund("0x01", SIGNER, 1_000_000, "0x" + "66" * 20), "give amount"),
        (Refund("0x01", SIGNER, 1_010_000, "0x" + "77" * 20), "give token"),
    ],
)
def test_a_refund_proves_the_give_amount_came_back_only_to_the_signer(refund, why) -> None:
    problem = refund_problem(refund, ORDER, SIGNER.upper().replace("0X", "0x"))
    assert (problem is None) if why is None else (why in str(problem)), problem


def test_a_refund_to_the_beneficiary_is_no_proof_when_the_signer_is_another() -> None:
    refund = Refund("0x01", SIGNER, 1_010_000, "0x" + "66" * 20)
    assert "qtg's signer" in str(refund_problem(refund, ORDER, "0x" + "88" * 20))
