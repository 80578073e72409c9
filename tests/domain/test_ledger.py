"""The ledger against the chain (issue 43 item 2): which unknown transaction paid which node."""

from __future__ import annotations

from qtg.domain.evm import erc20_transfer_data
from qtg.domain.ledger import (
    CLOCK_SKEW_SECONDS,
    Candidate,
    ChainTx,
    chain_ahead,
    match_payments,
    node_transfer_call,
    transfer_call,
)

DEST = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
OTHER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
T0 = 1_800_000_000.0


def tx(nonce: int, *, to: str | None = DEST, value: int = 10**18, data: str = "0x", at: float = T0):
    return ChainTx(
        tx_hash=f"0x{nonce:064x}",
        nonce=nonce,
        to=to,
        value=value,
        data=data,
        block=100 + nonce,
        block_time=int(at),
    )


def cand(node: str, *, dest: str = DEST, value: int = 10**18, token=None, created=T0 - 60):
    return Candidate(
        request_node_id=node, call=transfer_call(dest, token, value), created_at=created
    )


def test_chain_ahead_is_the_nonces_the_ledger_never_recorded() -> None:
    assert list(chain_ahead(5, 5, 5)) == []
    assert list(chain_ahead(5, 3, 2)) == []  # behind: in flight, normal
    assert list(chain_ahead(5, 7, 6)) == [5, 6]  # pending ahead counts
    assert list(chain_ahead(0, 0, 3)) == [0, 1, 2]


def test_a_native_transfer_matches_its_node_by_destination_and_amount() -> None:
    matched, unmatched = match_payments([tx(5)], [cand("a", value=2 * 10**18), cand("b")])
    assert matched == {tx(5).tx_hash: "b"} and unmatched == []


def test_address_case_does_not_matter_but_amount_and_destination_do() -> None:
    assert match_payments([tx(5, to=DEST.upper().replace("0X", "0x"))], [cand("a")])[0]
    assert not match_payments([tx(5, value=10**18 - 1)], [cand("a")])[0]
    assert not match_payments([tx(5, to=OTHER)], [cand("a")])[0]
    assert not match_payments([tx(5, data="0x00")], [cand("a")])[0]  # calldata too


def test_an_erc20_transfer_matches_by_token_and_calldata() -> None:
    data = erc20_transfer_data(DEST, 12_500_000)
    erc = tx(3, to=TOKEN.lower(), value=0, data=data)
    node = cand("t", token=TOKEN, value=12_500_000)
    assert match_payments([erc], [node])[0] == {erc.tx_hash: "t"}
    # the same amount in native coin to the destination is not that token's payment
    assert not match_payments([tx(3, value=12_500_000)], [node])[0]
    # nor the token transfer to someone else
    other = tx(3, to=TOKEN.lower(), value=0, data=erc20_transfer_data(OTHER, 12_500_000))
    assert not match_payments([other], [node])[0]


def test_each_node_pays_once_and_two_identical_payments_are_two_nodes() -> None:
    txs = [tx(7), tx(8), tx(9)]
    matched, unmatched = match_payments(txs, [cand("late", created=T0 - 10), cand("early")])
    # oldest movement first, each node once; the third identical payment matches nothing
    assert matched == {tx(7).tx_hash: "early", tx(8).tx_hash: "late"}
    assert unmatched == [tx(9)]


def test_a_payment_cannot_precede_its_movement() -> None:
    old = tx(1, at=T0 - 3600)
    matched, unmatched = match_payments([old], [cand("a", created=T0)])
    assert matched == {} and unmatched == [old]
    # within the clock skew it still matches (clocks of chain and database differ)
    close = tx(1, at=T0 - CLOCK_SKEW_SECONDS + 1)
    assert match_payments([close], [cand("a", created=T0)])[0] == {close.tx_hash: "a"}


def test_a_contract_creation_matches_no_transfer() -> None:
    deploy = tx(0, to=None, value=0, data="0x6080")
    assert match_payments([deploy], [cand("a")]) == ({}, [deploy])


def test_a_node_transfer_call_is_what_the_executor_builds() -> None:
    native = node_transfer_call({"amount": "1.5", "destination": DEST}, {"evm": {"chain_id": 7}})
    assert native == (7, transfer_call(DEST, None, 15 * 10**17))
    token = node_transfer_call(
        {"amount": "12.5", "destination": DEST},
        {"evm": {"chain_id": 7, "token": TOKEN, "decimals": 6}},
    )
    assert token is not None and token[1].to == TOKEN.lower() and token[1].value == 0
    assert token[1].data == erc20_transfer_data(DEST, 12_500_000)
    # a node that could never have been built cannot have paid
    assert (
        node_transfer_call({"amount": "x", "destination": DEST}, {"evm": {"chain_id": 7}}) is None
    )
    assert (
        node_transfer_call({"amount": "1", "destination": "nope"}, {"evm": {"chain_id": 7}}) is None
    )
    assert node_transfer_call({"amount": "1", "destination": DEST}, {}) is None


def test_the_node_that_reserved_the_nonce_is_matched_first() -> None:
    # two identical transfers: the one whose reservation the ledger kept takes its nonce
    early, late = cand("early"), cand("late", created=T0 - 10)
    matched, _ = match_payments([tx(9)], [early, late], reserved_by={9: "late"})
    assert matched == {tx(9).tx_hash: "late"}
    # but only when the transaction is that node's transfer
    other = cand("other", value=5)
    matched, _ = match_payments([tx(9)], [early, other], reserved_by={9: "other"})
    assert matched == {tx(9).tx_hash: "early"}
