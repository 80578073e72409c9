"""Issue 43 item 1 against a real anvil and a real database: who consumed a nonce is read
from the block that consumed it; a missing receipt is never evidence.

- Receipt lookups by hash that never answer (a provider whose index lags for ever):
  each destination is paid exactly once, judged by anvil's balances, and the movements
  complete from the block's receipts; with block receipts unreadable too, nothing is
  FAILED, nothing is paid twice, and the wait pages (`evm_evidence_missing`).
- A nonce consumed by a transaction qtg never signed: the signer is held on every chain
  (`evm_signer_holds`, a critical page), the node is UNKNOWN for a person, the next
  prepare of that signer waits (EVM_SIGNER_HELD).
- A nonce consumed by qtg's own gap fill: EVM_NOT_LANDED naming that hash and block.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from runtime.rt_procs import query, request_states, wait_until

from evm.anvil import ADDRESSES, deploy_token, token_balance
from evm.lagproxy import LagProxy
from evm.test_chain_faults import context, fresh_address, send, settings_for, with_refs
from evm.test_transient_and_lanes import launch, nodes, seed, settled
from qtg.db import Database
from qtg.providers.base import ObserveStatus, RecoverOutcome, RetryLater
from qtg.providers.registry import build_registry

pytestmark = pytest.mark.slow

WEI = 10**18
NEVER = 1e9  # seconds: a lag that never ends


def paid_once(anvil, payments, sent_before: int) -> None:
    for destination, amount in payments:
        assert anvil.balance(destination) == int(Decimal(amount) * WEI), destination
    assert anvil.nonce(ADDRESSES[0]) == sent_before + len(payments)


def test_receipts_that_never_answer_complete_from_the_block_and_pay_once(anvil, dsn, procs) -> None:
    """On a23afdb each payment was made three times and ended FAILED EVM_NOT_LANDED."""
    proxy = LagProxy(anvil.url, lag=NEVER)
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), f"0.{i + 1}") for i in range(4)]
    try:
        launch(procs, dsn, proxy.url, MG_EVM_EVIDENCE_ATTENTION_SECONDS="600").wait_ready()
        ids = seed(dsn, payments, key="noreceipt")
        states = wait_until(lambda: settled(dsn, ids), 120, "the movements to settle")
    finally:
        proxy.close()
    assert proxy.nulls > 0  # the by-hash lookups did answer null
    assert set(states.values()) == {"COMPLETED"}, states
    paid_once(anvil, payments, sent_before)
    assert query(dsn, "SELECT count(*) FROM evm_signed_transactions") == [(len(payments),)]


def test_no_readable_receipt_anywhere_waits_pays_once_and_pages(anvil, dsn, procs) -> None:
    proxy = LagProxy(anvil.url, lag=NEVER, null_methods=frozenset({"eth_getBlockReceipts"}))
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), "0.5"), (fresh_address(), "0.25")]
    try:
        launch(procs, dsn, proxy.url, MG_EVM_EVIDENCE_ATTENTION_SECONDS="2").wait_ready()
        ids = seed(dsn, payments, key="noevidence")
        wait_until(
            lambda: (
                query(
                    dsn,
                    "SELECT count(*) FROM notifications"
                    " WHERE kind = 'evm_evidence_missing' AND severity = 'critical'",
                )
                == [(2,)]
            ),
            90,
            "a critical page per nonce whose evidence is missing",
        )
        # keep watching a while: nothing is re-sent, nothing FAILED
        wait_until(lambda: proxy.nulls > 50, 60, "many more unanswered lookups")
        rows = nodes(dsn, ids)
    finally:
        proxy.close()
    assert all(state not in ("FAILED", "READY") for state, *_ in rows), rows
    assert "FAILED" not in set(request_states(dsn, ids).values())
    paid_once(anvil, payments, sent_before)
    assert query(dsn, "SELECT count(*) FROM evm_signed_transactions") == [(2,)]


async def _consumed_by_another(anvil, dsn, db, *, as_gap_fill: bool):
    """Our payment is signed, kept and broadcast, then dropped from anvil's pool; another
    transaction of the same key takes its nonce and is mined. (registry, ctx, refs,
    the consuming hash, destination)."""
    registry = build_registry(settings_for(anvil.url, dsn), db)
    destination = fresh_address()
    anvil.call("evm_setAutomine", False)
    try:
        ctx = context("foreign" if not as_gap_fill else "gapfill", destination)
        refs = await send(registry, ctx)
        anvil.call("anvil_dropTransaction", refs["tx_hash"])
        other = anvil.call(
            "eth_sendTransaction",
            {
                "from": ADDRESSES[0],
                "to": ADDRESSES[0],
                "value": "0x0",
                "nonce": hex(refs["nonce"]),
                "gas": hex(21000),
            },
        )
        anvil.call("evm_mine")
    finally:
        anvil.call("evm_setAutomine", True)
    if as_gap_fill:  # as the nonce reaper would have kept its own gap fill
        raw = anvil.call("eth_getRawTransactionByHash", other)
        query(
            dsn,
            "INSERT INTO evm_signed_transactions (chain_id, address, nonce, kind, tx_hash, raw,"
            " payload, max_fee_per_gas, max_priority_fee_per_gas, request_node_id)"
            " VALUES (%s, %s, %s, 'gap_fill', %s, %s, '{}', 1, 1, 'gap_fill') RETURNING id",
            (refs["chain_id"], ADDRESSES[0].lower(), refs["nonce"], other, raw),
        )
    return registry, ctx, refs, other, destination


async def test_a_foreign_consumer_holds_the_signer_and_pages(anvil, dsn, db: Database) -> None:
    registry, ctx, refs, other, destination = await _consumed_by_another(
        anvil, dsn, db, as_gap_fill=False
    )
    executor = registry.executor_for("evm_transfer")
    try:
        seen = await executor.observe(with_refs(ctx, refs))
        assert seen.status is ObserveStatus.UNKNOWN, seen
        assert seen.error_code == "EVM_FOREIGN_NONCE_CONSUMER"
        assert other in (seen.error_detail or "")
        again = await executor.recover(with_refs(ctx, refs))
        assert again.outcome is RecoverOutcome.UNKNOWN  # never a new attempt by itself
        [(reason, chain, evidence)] = query(
            dsn, "SELECT reason, chain_id, evidence FROM evm_signer_holds WHERE cleared_at IS NULL"
        )
        assert reason == "FOREIGN_NONCE_CONSUMER" and chain is None  # every chain
        assert evidence["consumer"] == other and evidence["nonce"] == refs["nonce"]
        assert query(dsn, "SELECT severity FROM notifications WHERE kind = 'evm_signer_hold'") == [
            ("critical",)
        ]
        with pytest.raises(RetryLater) as held:  # the signer's next payment waits
            await executor.prepare(context("after", fresh_address()))
        assert held.value.code == "EVM_SIGNER_HELD"
    finally:
        await registry.aclose()
    assert anvil.balance(destination) == 0


async def test_qtgs_own_gap_fill_as_consumer_is_proof_of_not_landed(
    anvil, dsn, db: Database
) -> None:
    registry, ctx, refs, other, destination = await _consumed_by_another(
        anvil, dsn, db, as_gap_fill=True
    )
    executor = registry.executor_for("evm_transfer")
    try:
        seen = await executor.observe(with_refs(ctx, refs))
        assert seen.status is ObserveStatus.UNKNOWN, seen
        assert seen.error_code == "EVM_NOT_LANDED"
        assert other in (seen.error_detail or "") and "block" in (seen.error_detail or "")
        recovered = await executor.recover(with_refs(ctx, refs))
        assert recovered.outcome is RecoverOutcome.NOT_SUBMITTED
        assert other in (recovered.error_detail or "")
    finally:
        await registry.aclose()
    assert query(dsn, "SELECT count(*) FROM evm_signer_holds") == [(0,)]
    assert anvil.balance(destination) == 0


def test_an_rpc_answering_null_to_everything_fails_over_to_the_healthy_one(
    anvil, dsn, procs
) -> None:
    """On a23afdb an RPC URL answering `result: null` failed 5 of 5 movements with
    PREPARE_ERROR (a TypeError in chain_id_on_chain) although a healthy second URL was
    configured: a null answer is no answer, and reads fail over."""
    nulls = LagProxy(anvil.url, lag=0, null_methods=frozenset({"*"}))
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), f"0.{i + 1}") for i in range(5)]
    try:
        launch(procs, dsn, f"{nulls.url}|{anvil.url}").wait_ready()
        ids = seed(dsn, payments, key="nullrpc")
        states = wait_until(lambda: settled(dsn, ids), 90, "the movements to settle")
    finally:
        nulls.close()
    assert nulls.nulls > 0
    assert set(states.values()) == {"COMPLETED"}, states
    paid_once(anvil, payments, sent_before)


#: A token whose `transfer` logs Transfer(caller, to, amount) and returns true, but
#: moves nothing (its balanceOf answers 1 for everyone, before and after).
LYING_TOKEN = (
    "0x602435600052600435337f"
    + "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
    + "60206000a3600160005260206000f3"
)


def test_a_token_that_logs_without_moving_balances_needs_a_person(anvil, dsn, procs) -> None:
    """Issue 43 item 4: on a23afdb such a transfer reached COMPLETED on its log alone."""
    token = deploy_token(anvil, 1_000)
    anvil.call("anvil_setCode", token, LYING_TOKEN)
    destination = fresh_address()
    launch(procs, dsn, anvil.url).wait_ready()
    [rid] = seed(dsn, [(destination, "50")], key="liar", token={"token": token, "decimals": 0})
    wait_until(
        lambda: request_states(dsn, [rid])[rid] == "MANUAL_INTERVENTION",
        60,
        "the movement to need a person",
    )
    [(state, code, detail)] = query(
        dsn, "SELECT node_state, error_code, error_detail FROM movement_request_nodes"
    )
    assert (state, code) == ("UNKNOWN", "EVM_EFFECT_UNVERIFIED"), detail
    assert "moved by 0" in detail and "Transfer logs say -50" in detail  # the evidence
    [(tx_hash,)] = query(dsn, "SELECT tx_hash FROM evm_signed_transactions")
    receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
    assert receipt["status"] == "0x1" and len(receipt["logs"]) == 1  # it did log a Transfer


def test_a_genuine_token_payment_completes_on_its_log_and_balances(anvil, dsn, procs) -> None:
    token = deploy_token(anvil, 1_000)
    destination = fresh_address()
    launch(procs, dsn, anvil.url).wait_ready()
    ids = seed(dsn, [(destination, "50")], key="genuine", token={"token": token, "decimals": 0})
    states = wait_until(lambda: settled(dsn, ids), 60, "the movement to settle")
    assert set(states.values()) == {"COMPLETED"}
    assert token_balance(anvil, token, destination) == 50


@pytest.mark.parametrize("wording", ["known transaction: 0x1234", "AlreadyKnown"])
def test_a_known_transaction_refusal_never_releases_the_nonce(
    anvil, dsn, procs, wording: str
) -> None:
    """Issue 43 item 6: the "known transaction" wording (Besu, Erigon; Nethermind's
    "AlreadyKnown") released a nonce whose bytes may be in a mempool and failed the
    movement EVM_REJECTED. It is in flight: the chain decides, and it is paid once."""
    from evm.lagproxy import FaultProxy

    proxy = FaultProxy(anvil.url, seed=5)
    proxy.refuse_sends(1, wording)
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), "0.5")]
    try:
        launch(procs, dsn, proxy.url).wait_ready()
        ids = seed(dsn, payments, key="known")
        states = wait_until(lambda: settled(dsn, ids), 90, "the movement to settle")
    finally:
        proxy.close()
    assert proxy.count("refused") == 1
    assert set(states.values()) == {"COMPLETED"}, states
    paid_once(anvil, payments, sent_before)
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations WHERE state = 'released'") == [
        (0,)
    ]
