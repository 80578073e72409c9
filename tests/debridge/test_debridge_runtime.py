"""Done-when of issue 46 (deBridge half) under a real `bin/qtg-runtime`, two anvil chains,
a local taker and a local order-status service speaking DLN's API shape:

- `debridge.usdc_swap_bridge` (debridge_send → debridge_fulfillment) moves exactly
  N test USDC to B's receiver: A's holder gives N plus the taker's margin once (one
  CreatedOrder, the fixed native fee once), B's receiver gets exactly N once;
- the status API saying "Fulfilled" while the destination chain does not show it
  is no proof: the node waits (an order unfulfilled past the bound pages:
  test_debridge_cancel.py);
- kill -9 before and after createOrder's broadcast, and while the fulfilment is
  outstanding with the status API down: after a restart one order, one fulfilment.
"""

from __future__ import annotations

import pytest
import trio
from evm.anvil import ADDRESSES
from runtime.rt_procs import all_completed, query, request_states, wait_until

from debridge.flow import MARGIN_BPS, RECOVER_FAST, launch, nodes, seed
from debridge.local import FIXED_FEE, TAKER, LocalDln, balance, created_orders, set_up
from qtg.db import Database
from qtg.services.movements import resume_movement

pytestmark = pytest.mark.slow

USDC = 10**6
HOLDER, RECEIVER = ADDRESSES[0], ADDRESSES[1]


@pytest.fixture
def world(chains):
    a, b = chains
    dep = set_up(a, b, 100 * USDC)
    dln = LocalDln(a, b, dep).start()
    yield a, b, dep, dln
    dln.stop()


def _moved_once(world, take: int) -> None:
    """Judged from both chains: A gave take + margin once, B's receiver got take once."""
    a, b, dep, dln = world
    give = take + -(-take * MARGIN_BPS // 10_000)
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC - give
    assert balance(b, dep.token_b, RECEIVER) == take
    assert len(created_orders(a, dep)) == 1
    assert len(dln.fulfilled) == 1
    # the taker's unlock was claimed on A: DlnSource paid the give amount out once
    assert balance(a, dep.token_a, TAKER) == give
    assert balance(a, dep.token_a, dep.source) == 0
    assert not dln.errors


def _urls(world) -> tuple[str, str]:
    return world[0].url, world[1].url


def test_the_order_moves_exactly_n_and_the_api_alone_is_no_proof(world, dsn, procs) -> None:
    a, b, dep, dln = world
    dln.hold = True  # no taker yet …
    dln.lie_fulfilled = True  # … while the status API already says Fulfilled
    launch(procs, dsn, _urls(world), dep, dln.url).wait_ready()
    ids = seed(dsn, RECEIVER, ["12.5"])
    wait_until(lambda: nodes(dsn)["fulfillment"][3] >= 5, 60, "fulfilment observations")
    assert nodes(dsn)["fulfillment"][0] != "COMPLETED"  # the API said so; the chain did not
    assert balance(b, dep.token_b, RECEIVER) == 0
    [(_, oid)] = created_orders(a, dep)
    dln.lie_fulfilled, dln.hold = False, False
    wait_until(lambda: all_completed(dsn, ids), 60, "the debridge movement to complete")
    _moved_once(world, 12_500_000)
    n = nodes(dsn)
    assert {k: v[0] for k, v in n.items()} == {"send": "COMPLETED", "fulfillment": "COMPLETED"}
    refs = n["fulfillment"][2]
    assert refs["order_id"] == oid and refs["fulfilled_amount"] == "12500000"
    receipt = b.call("eth_getTransactionReceipt", refs["dest_tx_hash"])
    assert receipt["status"] == "0x1" and receipt["to"].lower() == dep.destination
    create = a.call("eth_getTransactionReceipt", n["send"][2]["create_tx_hash"])
    assert int(a.call("eth_getTransactionByHash", create["transactionHash"])["value"], 16) == (
        FIXED_FEE
    )
    assert dln.requests and all(r == f"/api/Orders/{oid}" for r in dln.requests)


@pytest.mark.parametrize(
    "crash", ["debridge_send.before_broadcast", "debridge_send.after_broadcast"]
)
def test_kill_9_around_the_broadcast_creates_one_order(world, dsn, procs, crash) -> None:
    _, _, dep, dln = world
    doomed = launch(procs, dsn, _urls(world), dep, dln.url, QTG_TEST_CRASH_AT=crash)
    doomed.wait_ready()
    ids = seed(dsn, RECEIVER, ["7"], batch="kill")
    assert doomed.wait_exit(60) == -9
    assert nodes(dsn)["send"][0] == "SUBMITTING"
    launch(procs, dsn, _urls(world), dep, dln.url, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 90, f"recovery after a kill at {crash}")
    _moved_once(world, 7 * USDC)
    # the kept signed bytes were sent again, never a new order: attempt 1 landed
    assert nodes(dsn)["send"][1] == 1


def test_a_kill_while_the_fulfilment_waits_and_the_api_is_down(world, dsn, procs) -> None:
    _, _, dep, dln = world
    dln.hold, dln.down = True, True
    doomed = launch(procs, dsn, _urls(world), dep, dln.url)
    doomed.wait_ready()
    ids = seed(dsn, RECEIVER, ["3"], batch="wait")
    wait_until(lambda: len(dln.requests) >= 3, 30, "the runtime to ask the down API")
    assert nodes(dsn)["send"][0] == "COMPLETED"
    doomed.kill()  # kill -9 while the fulfilment is outstanding
    restarted = launch(procs, dsn, _urls(world), dep, dln.url, **RECOVER_FAST)
    restarted.wait_ready()
    dln.hold = False  # the taker fulfils; the API stays down: the chain decides alone
    wait_until(lambda: all_completed(dsn, ids), 60, "the movement to complete after the kill")
    _moved_once(world, 3 * USDC)
    assert nodes(dsn)["fulfillment"][2]["fulfilled_amount"] == "3000000"


def test_an_order_unfulfilled_past_the_bound_pages_and_a_resume_sees_the_late_taker(
    world, dsn, procs
) -> None:
    _, _, dep, dln = world
    dln.hold = True
    env = {**RECOVER_FAST, "MG_DEBRIDGE_UNFULFILLED_AFTER_SECONDS": "1"}
    launch(procs, dsn, _urls(world), dep, dln.url, **env).wait_ready()
    [rid] = seed(dsn, RECEIVER, ["2"], batch="late")
    wait_until(lambda: request_states(dsn, [rid])[rid] == "MANUAL_INTERVENTION", 60, "the page")
    [(state, code)] = query(
        dsn, "SELECT node_state, error_code FROM movement_request_nodes"
        " WHERE node_key = 'fulfillment'",
    )  # fmt: skip
    assert (state, code) == ("UNKNOWN", "DEBRIDGE_UNFULFILLED")  # undecided, never FAILED
    dln.hold = False  # the taker comes late; an operator resumes: recovery asks the chain
    wait_until(lambda: dln.fulfilled, 30, "the late fulfilment")

    async def resume() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            await resume_movement(db, rid, actor="alice")

    trio.run(resume)
    wait_until(lambda: all_completed(dsn, [rid]), 60, "the resumed movement to complete")
    _moved_once(world, 2 * USDC)


def test_a_fulfilment_made_while_qtg_was_away_past_its_window_is_found(world, dsn, procs) -> None:
    """The FulfilledOrder search starts where the first look pinned it (kept in the node's
    refs), not a window behind the head: a fulfilment made while qtg was away, with more
    blocks since than the window, still completes the node."""
    _, b, dep, dln = world
    window = {"MG_DEBRIDGE_LOG_SEARCH_BLOCKS": "100"}
    dln.hold = True
    doomed = launch(procs, dsn, _urls(world), dep, dln.url, **window)
    doomed.wait_ready()
    ids = seed(dsn, RECEIVER, ["4"], batch="away")
    wait_until(lambda: "dest_from_block" in nodes(dsn)["fulfillment"][2], 30, "the first look")
    pinned = nodes(dsn)["fulfillment"][2]["dest_from_block"]
    doomed.kill()  # qtg is away while the taker fulfils …
    dln.hold = False
    wait_until(lambda: dln.fulfilled, 30, "the fulfilment")
    b.call("anvil_mine", hex(300))  # … and for longer than the first look's window
    launch(procs, dsn, _urls(world), dep, dln.url, **RECOVER_FAST, **window).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the movement to complete after the gap")
    _moved_once(world, 4 * USDC)
    assert nodes(dsn)["fulfillment"][2]["dest_from_block"] == pinned
