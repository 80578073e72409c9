"""The cancel lever (issue 46): an order no taker fulfils is UNKNOWN past the bound, pages
(MANUAL_INTERVENTION), and operators resolving it FAILED (four eyes) do not make it so.

- qtg sends `sendEvmOrderCancel` on the destination from its signer (kept bytes first);
  while the cancel's refund has not reached the source, the node stays UNKNOWN
  (FAILURE_NOT_PROVEN); once the source holds the ClaimedOrderCancel it is FAILED, the
  proof naming the refund; the holder has its give amount back, the receiver nothing, and
  no taker can fulfil the order any more;
- a taker that fulfilled first overrules the operators: the receiver was paid, the node
  COMPLETED, no cancel sent.
"""

from __future__ import annotations

import json

import pytest
import trio
from eth_account import Account
from evm.anvil import ADDRESSES, KEYS
from runtime.rt_procs import query, request_states, wait_until

from debridge.flow import RECOVER_FAST, launch, nodes, seed
from debridge.local import (
    CHAIN_A,
    LocalDln,
    balance,
    created_orders,
    set_up,
    take_status,
)
from qtg.config import Settings
from qtg.db import Database
from qtg.domain.debridge import TAKE_FULFILLED, TAKE_SENT_ORDER_CANCEL, TAKE_SENT_UNLOCK
from qtg.services.node_attention import resolve_node

pytestmark = pytest.mark.slow

USDC = 10**6
HOLDER, RECEIVER = ADDRESSES[0], ADDRESSES[1]
LEVER = {
    **RECOVER_FAST,
    "MG_DEBRIDGE_UNFULFILLED_AFTER_SECONDS": "1",
    "MG_NODE_UNKNOWN_ATTENTION_SECONDS": "1",
    "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS": "0.3",
}


@pytest.fixture
def world(chains):
    a, b = chains
    dep = set_up(a, b, 100 * USDC)
    dln = LocalDln(a, b, dep, hold=True).start()
    yield a, b, dep, dln
    dln.stop()


def _resolve_failed(dsn: str, rid: str) -> list[bool]:
    """alice proposes FAILED, bob confirms: whether each call applied it."""

    async def run() -> list[bool]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        async with Database(dsn, min_size=1, max_size=2) as db:
            out = []
            for actor in ("alice", "bob"):
                _, applied = await resolve_node(
                    db, settings, rid, "fulfillment", actor=actor, outcome="FAILED",
                    evidence="no taker after the bound; cancel the order",
                )  # fmt: skip
                out.append(applied)
            return out

    return trio.run(run)


def _paged(dsn: str, rid: str) -> None:
    wait_until(
        lambda: request_states(dsn, [rid]).get(rid) == "MANUAL_INTERVENTION",
        60,
        "the unfulfilled order to page (MANUAL_INTERVENTION)",
    )
    state, _, _, _ = nodes(dsn)["fulfillment"]
    [(code,)] = query(
        dsn, "SELECT error_code FROM movement_request_nodes WHERE node_key = 'fulfillment'"
    )
    assert (state, code) == ("UNKNOWN", "DEBRIDGE_UNFULFILLED")


def _node_error(dsn: str) -> tuple:
    [row] = query(
        dsn,
        "SELECT node_state, error_code, error_detail FROM movement_request_nodes"
        " WHERE node_key = 'fulfillment'",
    )
    return row


def test_a_cancel_is_failed_only_once_the_source_shows_the_refund(world, dsn, procs) -> None:
    a, b, dep, dln = world
    dln.relay_cancels = False  # the cancel's message to the source is slow
    launch(procs, dsn, (a.url, b.url), dep, dln.url, **LEVER).wait_ready()
    [rid] = seed(dsn, RECEIVER, ["10"], batch="cancel")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    give = 10 * USDC + 10 * USDC // 100
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC - give
    assert _resolve_failed(dsn, rid) == [False, False]  # confirmed, not applied
    wait_until(lambda: take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL, 30, "qtg's cancel on B")
    # cancelled on B, nothing refunded on A yet: no proof, so not FAILED
    wait_until(lambda: query(dsn, "SELECT count(*) FROM evm_nonce_reservations"
                             " WHERE request_node_id LIKE '%:cancel' AND state = 'consumed'")
               == [(1,)], 30, "the cancel's reservation consumed")  # fmt: skip
    assert _node_error(dsn)[:2] == ("UNKNOWN", "FAILURE_NOT_PROVEN")
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC - give
    dln.relay_cancels = True
    wait_until(lambda: _node_error(dsn)[0] == "FAILED", 30, "FAILED once the refund shows")
    _, code, detail = _node_error(dsn)
    assert code == "RESOLVED_FAILED_BY_OPERATORS" and "debridge_refund" in detail, detail
    [(proof,)] = query(
        dsn, "SELECT proof FROM movement_node_resolutions WHERE applied_at IS NOT NULL"
    )
    assert proof["kind"] == "debridge_refund" and proof["order_id"] == oid
    assert proof["refunded"] == str(give)
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC  # the give amount came back
    dln.hold = False  # a taker now: the order cannot be fulfilled any more
    passes = dln.passes
    wait_until(lambda: dln.passes >= passes + 2, 10, "the taker to go over the orders")
    assert balance(b, dep.token_b, RECEIVER) == 0 and dln.fulfilled == [] and not dln.errors


def test_a_taker_first_overrules_the_operators(world, dsn, procs) -> None:
    a, b, dep, dln = world
    dln.relay_cancels = False
    launch(procs, dsn, (a.url, b.url), dep, dln.url, **LEVER).wait_ready()
    [rid] = seed(dsn, RECEIVER, ["4"], batch="overrule")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    dln.hold = False  # the taker comes, late
    wait_until(lambda: oid in dln.fulfilled, 30, "the late fulfilment")
    assert take_status(b, dep, oid) in (TAKE_FULFILLED, TAKE_SENT_UNLOCK)
    assert _resolve_failed(dsn, rid) == [False, False]
    wait_until(lambda: _node_error(dsn)[0] == "COMPLETED", 30, "the node paid, not FAILED")
    assert balance(b, dep.token_b, RECEIVER) == 4 * USDC
    assert request_states(dsn, [rid])[rid] == "COMPLETED"
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations"
                 " WHERE request_node_id LIKE '%:cancel'") == [(0,)]  # fmt: skip


@pytest.mark.parametrize(
    "crash", ["debridge_cancel.before_broadcast", "debridge_cancel.after_broadcast"]
)
def test_kill_9_around_the_cancels_broadcast_cancels_once(world, dsn, procs, crash) -> None:
    a, b, dep, dln = world
    deployed = b.nonce(ADDRESSES[0])  # the set-up's transactions on B
    doomed = launch(procs, dsn, (a.url, b.url), dep, dln.url, QTG_TEST_CRASH_AT=crash, **LEVER)
    doomed.wait_ready()
    [rid] = seed(dsn, RECEIVER, ["6"], batch="cancel-kill")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    assert _resolve_failed(dsn, rid) == [False, False]
    assert doomed.wait_exit(60) == -9  # killed with the cancel's bytes kept
    launch(procs, dsn, (a.url, b.url), dep, dln.url, **LEVER).wait_ready()
    wait_until(lambda: _node_error(dsn)[0] == "FAILED", 60, "FAILED once the refund shows")
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC
    assert take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL
    # the kept bytes went out (again), never a second cancel: one transaction of ours on B
    assert b.nonce(ADDRESSES[0]) == deployed + 1
    [(count,)] = query(
        dsn, "SELECT count(*) FROM evm_nonce_reservations WHERE request_node_id LIKE '%:cancel'"
    )
    assert count == 1


def test_a_cancel_left_unmined_is_sent_again_never_replaced(world, dsn, procs) -> None:
    """The reaper's reconcile sees the cancel's reservation stale while the FAILED resolution
    waits: it sends the cancel's kept bytes again (kind provider_cancel) and never replaces
    them by a zero-value self-transfer, which would leave the order fillable for ever."""
    a, b, dep, dln = world
    env = {**LEVER, "MG_EVM_NONCE_RESERVATION_STALE_SECONDS": "1"}
    launch(procs, dsn, (a.url, b.url), dep, dln.url, **env).wait_ready()
    [rid] = seed(dsn, RECEIVER, ["5"], batch="stale-cancel")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    b.call("evm_setAutomine", False)  # B mines nothing: the cancel waits in the mempool
    try:
        assert _resolve_failed(dsn, rid) == [False, False]
        stale = (
            "SELECT count(*) FROM evm_nonce_reservations WHERE request_node_id LIKE '%:cancel'"
            " AND state = 'broadcast' AND updated_at < now() - interval '3 seconds'"
        )
        # stale (1 s) for ten reaper passes (0.3 s) of reconcile: each saw it, none replaced it
        wait_until(lambda: query(dsn, stale) == [(1,)], 30, "the cancel stale, unmined")
        kinds = query(
            dsn, "SELECT kind, count(*) FROM evm_signed_transactions"
            " WHERE request_node_id LIKE '%:cancel' GROUP BY kind",
        )  # fmt: skip
        assert kinds == [("provider_cancel", 1)], kinds
        assert take_status(b, dep, oid) == 0 and _node_error(dsn)[0] == "UNKNOWN"
    finally:
        b.call("evm_setAutomine", True)
    b.call("evm_mine")  # the mempool's cancel (the same bytes, sent again) is mined
    wait_until(lambda: take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL, 30, "the cancel on B")
    wait_until(lambda: _node_error(dsn)[0] == "FAILED", 30, "FAILED once the refund shows")
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC
    assert query(dsn, "SELECT kind FROM evm_signed_transactions"
                 " WHERE request_node_id LIKE '%:cancel'") == [("provider_cancel",)]  # fmt: skip


def test_a_cancel_beaten_to_its_nonce_is_sent_afresh(world, dsn, procs) -> None:
    """The cancel's nonce consumed by another transaction of ours (here the zero-value
    self-transfer the reaper put there before cancels had their own kind, kept under the
    cancel's key) while takeOrders is still 0: a fresh cancel, on a new nonce, is sent."""
    a, b, dep, dln = world
    launch(procs, dsn, (a.url, b.url), dep, dln.url, **LEVER).wait_ready()
    [rid] = seed(dsn, RECEIVER, ["3"], batch="beaten")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    b.call("evm_setAutomine", False)
    try:
        assert _resolve_failed(dsn, rid) == [False, False]
        kept = (
            "SELECT request_node_id, attempt_no, nonce, payload FROM evm_signed_transactions"
            " WHERE request_node_id LIKE '%:cancel'"
        )
        wait_until(lambda: query(dsn, kept), 30, "the cancel kept")
        [(key, attempt, nonce, payload)] = query(dsn, kept)
        fee = 3 * int(payload["maxFeePerGas"])
        tx = {"from": ADDRESSES[0], "to": ADDRESSES[0], "value": 0, "data": "0x",
              "gas": 21_000, "maxFeePerGas": fee, "maxPriorityFeePerGas": fee, "nonce": nonce,
              "chainId": int(payload["chainId"]), "type": 2}  # fmt: skip
        signed = Account.sign_transaction(tx, KEYS[0])
        raw = "0x" + bytes(getattr(signed, "raw_transaction", None) or signed.rawTransaction).hex()
        tx_hash = "0x" + bytes(signed.hash).hex()
        query(
            dsn, "INSERT INTO evm_signed_transactions (chain_id, address, nonce, kind,"
            " request_node_id, attempt_no, tx_hash, raw, payload, max_fee_per_gas,"
            " max_priority_fee_per_gas) VALUES (%s, %s, %s, 'cancel', %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING id",
            (int(payload["chainId"]), ADDRESSES[0].lower(), nonce, key, attempt, tx_hash, raw,
             json.dumps({k: str(v) for k, v in tx.items()}), fee, fee),
        )  # fmt: skip
        assert b.call("eth_sendRawTransaction", raw) == tx_hash  # replaces the cancel
    finally:
        b.call("evm_setAutomine", True)
    b.call("evm_mine")
    wait_until(lambda: take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL, 30, "a fresh cancel")
    wait_until(lambda: _node_error(dsn)[0] == "FAILED", 30, "FAILED once the refund shows")
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC
    keys = query(dsn, "SELECT request_node_id, state FROM evm_nonce_reservations"
                 " WHERE request_node_id LIKE '%:cancel%' ORDER BY nonce")  # fmt: skip
    assert [(k.split(":", 1)[1], s) for k, s in keys] == [
        ("cancel", "consumed"),
        ("cancel:2", "consumed"),
    ], keys


def test_a_refund_is_proof_only_at_the_trusted_depth(world, dsn, procs) -> None:
    """The refund is read where the judge trusts chain A (3 confirmations here): seen at
    the tip only, the node stays UNKNOWN; two blocks later it is FAILED."""
    a, b, dep, dln = world
    dln.relay_cancels = False
    env = {**LEVER, "MG_EVM_CONFIRMATIONS_BY_CHAIN": f"{CHAIN_A}=3"}
    runtime = launch(procs, dsn, (a.url, b.url), dep, dln.url, **env)
    runtime.wait_ready()
    [rid] = seed(dsn, RECEIVER, ["2"], batch="depth")

    def created_at_depth() -> bool:
        a.call("evm_mine")  # A's blocks come only with transactions: the order needs depth
        return nodes(dsn)["send"][0] == "COMPLETED"

    wait_until(created_at_depth, 30, "the order at depth")
    _paged(dsn, rid)
    [(_, oid)] = created_orders(a, dep)
    assert _resolve_failed(dsn, rid) == [False, False]
    wait_until(lambda: take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL, 30, "qtg's cancel on B")
    dln.relay_cancels = True  # the refund is mined at A's tip, and A mines nothing more
    runtime.wait_for(lambda r: "not yet at the trusted depth" in str(r.get("msg")), 30)
    assert _node_error(dsn)[:2] == ("UNKNOWN", "FAILURE_NOT_PROVEN")
    refund_block = int(a.call("eth_blockNumber"), 16)
    a.call("anvil_mine", hex(2))  # now 3 deep
    wait_until(lambda: _node_error(dsn)[0] == "FAILED", 30, "FAILED at the trusted depth")
    [(proof,)] = query(
        dsn, "SELECT proof FROM movement_node_resolutions WHERE applied_at IS NOT NULL"
    )
    assert proof["kind"] == "debridge_refund" and proof["refunded"] == str(
        2 * USDC + 2 * USDC // 100
    )
    receipt = a.call("eth_getTransactionReceipt", proof["tx_hash"])
    assert int(receipt["blockNumber"], 16) == refund_block
