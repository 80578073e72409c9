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

import pytest
import trio
from evm.anvil import ADDRESSES
from runtime.rt_procs import query, request_states, wait_until

from debridge.flow import RECOVER_FAST, launch, nodes, seed
from debridge.local import (
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
