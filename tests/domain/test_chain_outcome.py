"""The rule of issue 24 (qtg.domain.chain_outcome): a nonce's outcome is decided by the chain."""

from __future__ import annotations

import pytest

from qtg.config import ConfigError
from qtg.domain.chain_outcome import (
    TRANSFER_TOPIC,
    Facts,
    FeeCap,
    Receipt,
    Verdict,
    bumped,
    effect_seen,
    fee_over_cap,
    judge,
    not_landed_proof,
    parse_depths,
    parse_fee_caps,
    refusal_may_be_in_flight,
    trusted_head,
    with_margin,
)

A, B = "0x" + "aa" * 32, "0x" + "bb" * 32


def facts(**more) -> Facts:
    base = {
        "nonce": 5,
        "ours": [A],
        "receipts": [],
        "trusted_head": 100,
        "count_at_trusted": 5,
        "count_latest": 5,
        "newest_age_seconds": 1.0,
        "replace_after_seconds": 60.0,
    }
    return Facts(**{**base, **more})


def test_not_found_anywhere_and_nonce_free_is_a_wait_never_a_failure() -> None:
    # the read-lag case: no receipt, no mempool entry, the nonce unused → send the bytes again
    assert judge(facts()).verdict is Verdict.WAIT_REBROADCAST


def test_an_old_unmined_transaction_is_replaced_at_the_same_nonce() -> None:
    assert judge(facts(newest_age_seconds=61.0)).verdict is Verdict.REPLACE_WITH_BUMP


def test_a_receipt_of_ours_decides_once_deep_enough() -> None:
    mined = Receipt(B, status=1, block=100)
    assert judge(facts(ours=[A, B], receipts=[mined], count_at_trusted=6)).verdict is (
        Verdict.COMPLETED
    )
    assert judge(facts(receipts=[Receipt(A, 1, 101)], count_latest=6)).verdict is (
        Verdict.AWAIT_DEPTH
    )
    reverted = judge(facts(receipts=[Receipt(A, 0, 99)], count_at_trusted=6))
    assert reverted.verdict is Verdict.FAILED_REVERTED and reverted.receipt.tx_hash == A


def test_a_receipt_without_the_expected_effect_needs_a_person() -> None:
    found = Receipt(A, status=1, block=90, effect_ok=False)
    assert judge(facts(receipts=[found], count_at_trusted=6)).verdict is Verdict.NEEDS_PERSON


def test_a_receipt_that_is_not_ours_is_ignored() -> None:
    other = Receipt(B, status=1, block=90)
    assert judge(facts(receipts=[other])).verdict is Verdict.WAIT_REBROADCAST


def test_a_used_nonce_without_a_receipt_of_ours_is_never_proof() -> None:
    # issue 43: the count passed our nonce, no receipt of ours can be read and the
    # consuming transaction is not read yet: wait, however long; page past the bound
    used = {"count_at_trusted": 6, "count_latest": 6}
    waiting = judge(facts(**used, evidence_missing_seconds=10.0))
    assert waiting.verdict is Verdict.AWAIT_EVIDENCE and not waiting.attention
    late = judge(facts(**used, evidence_missing_seconds=10_000.0))
    assert late.verdict is Verdict.AWAIT_EVIDENCE and late.attention


def test_the_consuming_transaction_decides() -> None:
    used = {"count_at_trusted": 6, "count_latest": 6, "consumer_block": 42}
    C = "0x" + "cc" * 32
    # ours, its receipt unreadable: paid, waiting for the receipt (never a new attempt)
    mine = judge(facts(**used, ours=[A, B], consumer=B))
    assert mine.verdict is Verdict.AWAIT_EVIDENCE and mine.consumer == B
    # one of qtg's own other transactions (a gap fill): ours provably cannot land
    gap = judge(facts(**used, consumer=C, qtg_signed=[A, C]))
    assert gap.verdict is Verdict.NOT_LANDED and gap.consumer == C
    assert C in not_landed_proof(gap, 5) and "block 42" in not_landed_proof(gap, 5)
    # a hash qtg never signed: the key is used elsewhere
    foreign = judge(facts(**used, consumer=C, qtg_signed=[A]))
    assert foreign.verdict is Verdict.FOREIGN_CONSUMER and foreign.consumer == C
    # a receipt of ours still decides first
    paid = judge(facts(**used, consumer=C, receipts=[Receipt(A, 1, 40)]))
    assert paid.verdict is Verdict.COMPLETED


def test_in_flight_refusal_wordings() -> None:
    for text in (
        "already known",
        "Known transaction: 0xabc",
        "AlreadyKnown",
        "nonce too low: next nonce 7",
        "replacement transaction underpriced",
    ):
        assert refusal_may_be_in_flight(text), text
    assert not refusal_may_be_in_flight("insufficient funds for gas * price + value")


def test_a_nonce_used_only_above_the_trusted_depth_waits() -> None:
    assert judge(facts(count_latest=6)).verdict is Verdict.AWAIT_DEPTH


def test_nothing_signed_is_free_or_not_landed() -> None:
    assert judge(facts(ours=[])).verdict is Verdict.NOTHING_SIGNED
    assert judge(facts(ours=[], count_at_trusted=6, count_latest=6)).verdict is Verdict.NOT_LANDED


def test_depths_and_trusted_head() -> None:
    assert parse_depths("31337=3, 1=safe,10=finalized") == {31337: 3, 1: "safe", 10: "finalized"}
    for bad in ("x=1", "1=latest", "1"):
        with pytest.raises(ConfigError, match="MG_EVM_CONFIRMATIONS_BY_CHAIN"):
            parse_depths(bad)
    assert trusted_head(3, 100) == 98
    assert trusted_head(1, 100) == trusted_head(0, 100) == 100
    assert trusted_head("safe", 100, 90) == 90


def test_fee_caps_bump_and_margin() -> None:
    caps = parse_fee_caps("1=200:2.5")
    assert caps == {1: FeeCap(200 * 10**9, 2_500_000_000)}
    for bad in ("1=200", "x=1:1", "1=0:1", "1=a:b"):
        with pytest.raises(ConfigError, match="MG_EVM_FEE_CAPS"):
            parse_fee_caps(bad)
    assert fee_over_cap(caps[1], 200 * 10**9, 10**9) is None
    assert "maxFeePerGas" in fee_over_cap(caps[1], 200 * 10**9 + 1, 1)
    assert "maxPriorityFeePerGas" in fee_over_cap(caps[1], 1, 3 * 10**9)
    assert fee_over_cap(None, 10**30, 10**30) is None
    assert bumped(100, 0) == 112 and bumped(100, 500) == 500 and bumped(1, 0) == 2
    assert with_margin(21000, 20) == 25200 and with_margin(7, 10) == 8 and with_margin(5, 0) == 5


def test_effect_seen_needs_token_parties_and_amount() -> None:
    token, sender, dest = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20
    log = {
        "address": token,
        "topics": [TRANSFER_TOPIC, "0x" + "0" * 24 + sender[2:], "0x" + "0" * 24 + dest[2:]],
        "data": hex(50),
    }
    assert effect_seen([log], token, sender, dest, 50)
    assert not effect_seen([log], token, sender, dest, 51)
    assert not effect_seen([{**log, "address": "0x" + "44" * 20}], token, sender, dest, 50)
    assert not effect_seen([], token, sender, dest, 50)


def test_an_unverified_effect_waits_for_an_operator() -> None:
    from qtg.domain.derive import NodeView, derive_request_state
    from qtg.domain.states import RequestState

    node = NodeView("send", "action", "evm_transfer", "UNKNOWN", "EVM_EFFECT_UNVERIFIED")
    assert derive_request_state([node]) is RequestState.MANUAL_INTERVENTION
    recoverable = NodeView("send", "action", "evm_transfer", "UNKNOWN", "EVM_NOT_LANDED")
    assert derive_request_state([recoverable]) is None  # recovery makes a new attempt
