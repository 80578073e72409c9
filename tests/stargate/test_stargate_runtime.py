"""Done-when of issue 46 (Stargate half) under a real `bin/qtg-runtime`, two anvil
chains and a local LayerZero DVN + executor:

- `stargate.usdt_bridge` (send → delivery) moves exactly N test USDT from chain A
  to chain B: A's holder is N poorer (plus the native fee and gas, in ETH), B's
  recipient N richer, one PacketSent on A, one OFTReceived on B;
- the executor down (nothing delivered) and the runtime killed -9 while the delivery
  waits: the delivery stays PENDING, never FAILED; delivered while qtg is away and
  more blocks later than its search window, it is still found (the search start is
  pinned at the first look);
- kill -9 before and after the send's broadcast: after a restart the movement
  completes with one send and one delivery, attempt 1 (the kept bytes, never a
  second send). After the broadcast the node is left SUBMITTING with no outcome
  written, its runtime dead: node_recovery's Stargate arm (action types
  `stargate_%`) decides it from the chain's block — the only way out of
  SUBMITTING without submit's answer — and the movement goes on to the delivery;
- a send whose kept bytes revert on chain is FAILED naming that receipt, nothing moved.
"""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES
from runtime.rt_procs import all_completed, query, wait_until

from qtg.domain.observe_policy import recovery_lane
from stargate.flow import RECOVER_FAST, launch, nodes, seed
from stargate.local import (
    NATIVE_FEE,
    LayerZeroExecutor,
    deliveries,
    packets,
    send,
    set_up,
    usdt_balance,
)

pytestmark = pytest.mark.slow

USDT = 10**6
HOLDER, RECIPIENT = ADDRESSES[0], ADDRESSES[1]
#: a search window that the chain outruns within a test (default 50 000 blocks)
WINDOW = {"MG_STARGATE_DELIVERY_SEARCH_BLOCKS": "100"}


@pytest.fixture
def world(chains):
    a, b = chains
    da, db = set_up(a, b, 100 * USDT)
    lz = LayerZeroExecutor(a, b, da, db).start()
    yield a, b, da, db, lz
    lz.stop()


def _moved_once(world, amount: int) -> None:
    """Judged from the chains: A took `amount` once, B paid it once."""
    a, b, da, db, _ = world
    assert usdt_balance(a, da, HOLDER) == 100 * USDT - amount
    assert usdt_balance(a, da, da.pool) == amount
    assert usdt_balance(b, db, RECIPIENT) == amount
    assert len(packets(a, da)) == 1
    assert deliveries(b, db) == 1


def test_the_bridge_moves_exactly_n_usdt_from_a_to_b(world, dsn, procs) -> None:
    a, b, da, db, lz = world
    lz.delay = 2.0  # LayerZero takes its time
    eth_before = a.balance(HOLDER)
    launch(procs, dsn, (a.url, b.url), da, db).wait_ready()
    ids = seed(dsn, RECIPIENT, ["12.5"])
    wait_until(lambda: all_completed(dsn, ids), 60, "the stargate movement to complete")
    _moved_once(world, 12_500_000)
    n = nodes(dsn)
    assert {k: v[0] for k, v in n.items()} == {"send": "COMPLETED", "delivery": "COMPLETED"}
    send_refs = n["send"][2]
    receipt = a.call("eth_getTransactionReceipt", send_refs["send_tx_hash"])
    assert receipt["status"] == "0x1" and receipt["to"].lower() == da.pool
    assert send_refs["guid"] == lz.delivered[0]
    # the native fee went with the send: the holder paid it and gas, in ETH, once
    assert eth_before - a.balance(HOLDER) >= NATIVE_FEE
    assert a.balance(da.endpoint) == NATIVE_FEE
    [(artifacts,)] = query(
        dsn, "SELECT artifacts FROM movement_request_nodes WHERE node_key = 'delivery'"
    )
    assert artifacts["delivered"] == "12500000" and artifacts["token"] == db.token
    delivery = b.call("eth_getTransactionReceipt", artifacts["delivery_tx_hash"])
    assert delivery["status"] == "0x1" and delivery["to"].lower() == db.endpoint
    # approve + send on A: every reservation consumed
    assert query(dsn, "SELECT DISTINCT state FROM evm_nonce_reservations") == [("consumed",)]


def _observed(dsn: str) -> int:
    [(count,)] = query(
        dsn, "SELECT observe_count FROM movement_request_nodes WHERE node_key = 'delivery'"
    )
    return count


def test_an_executor_outage_and_a_kill_while_the_delivery_waits(world, dsn, procs) -> None:
    a, b, da, db, lz = world
    lz.down = True  # LayerZero delivers nothing
    doomed = launch(procs, dsn, (a.url, b.url), da, db, **WINDOW)
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["3"], batch="outage")
    wait_until(lambda: _observed(dsn) >= 3, 30, "the runtime to look for the delivery")
    assert nodes(dsn)["delivery"][0] not in ("FAILED", "COMPLETED")
    assert len(packets(a, da)) == 1 and usdt_balance(b, db, RECIPIENT) == 0
    doomed.kill()  # kill -9 while the delivery is outstanding
    restarted = launch(procs, dsn, (a.url, b.url), da, db, **RECOVER_FAST, **WINDOW)
    restarted.wait_ready()
    seen = _observed(dsn)
    wait_until(lambda: _observed(dsn) >= seen + 3, 30, "observations after the restart")
    state, _, refs = nodes(dsn)["delivery"]
    assert state not in ("FAILED", "COMPLETED"), state  # not delivered is pending, never failed
    pinned = refs["search_from_block"]  # where the first look started the GUID's search
    restarted.kill()  # and qtg is away while LayerZero delivers …
    lz.down = False
    wait_until(lambda: usdt_balance(b, db, RECIPIENT) == 3 * USDT, 30, "LayerZero to deliver")
    b.call("anvil_mine", hex(300))  # … and for longer than the first look's window
    launch(procs, dsn, (a.url, b.url), da, db, **RECOVER_FAST, **WINDOW).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the movement to complete after the outage")
    _moved_once(world, 3 * USDT)
    # found from the pinned start, not from a window behind the head it has since left
    assert nodes(dsn)["delivery"][2]["search_from_block"] == pinned


@pytest.mark.parametrize(
    "crash", ["stargate_send.before_broadcast", "stargate_send.after_broadcast"]
)
def test_kill_9_at_the_send_moves_once(world, dsn, procs, crash) -> None:
    a, b, da, db, _ = world
    doomed = launch(procs, dsn, (a.url, b.url), da, db, QTG_TEST_CRASH_AT=crash)
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["7"], batch="kill")
    assert doomed.wait_exit(60) == -9
    assert nodes(dsn)["send"][0] == "SUBMITTING"  # no outcome written
    assert recovery_lane("stargate_send") == "stargate"  # the arm that must decide it
    if crash.endswith("after_broadcast"):
        assert len(packets(a, da)) == 1  # the send is in a block; qtg does not know yet
    launch(procs, dsn, (a.url, b.url), da, db, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 90, f"recovery after a kill at {crash}")
    _moved_once(world, 7 * USDT)
    # the signed bytes were kept before the broadcast: recovery sends those very bytes
    # (never a new attempt while they may land), so attempt 1 is the one that landed
    assert nodes(dsn)["send"][1] == 1


def test_a_send_the_chain_reverted_is_failed_with_nothing_moved(world, dsn, procs) -> None:
    """FAILED only on the chain's proof: killed before the broadcast, the pool's route to B
    is then removed, so the kept bytes (sent by recovery, never re-signed) revert; the
    receipt of that very transaction is the proof that nothing left the holder."""
    a, b, da, db, _ = world
    doomed = launch(
        procs, dsn, (a.url, b.url), da, db, QTG_TEST_CRASH_AT="stargate_send.before_broadcast"
    )
    doomed.wait_ready()
    seed(dsn, RECIPIENT, ["4"], batch="revert")
    assert doomed.wait_exit(60) == -9
    send(a, da.pool, "setPeer(uint32,bytes32)", f"{db.eid:064x}", "00" * 32)
    launch(procs, dsn, (a.url, b.url), da, db, **RECOVER_FAST).wait_ready()
    wait_until(lambda: nodes(dsn)["send"][0] == "FAILED", 60, "the reverted send to fail")
    [(code, detail, refs)] = query(
        dsn,
        "SELECT error_code, error_detail, provider_refs FROM movement_request_nodes"
        " WHERE node_key = 'send'",
    )
    assert code == "STARGATE_SEND_REVERTED" and refs["tx_hash"] in detail  # names its proof
    receipt = a.call("eth_getTransactionReceipt", refs["tx_hash"])
    assert receipt["status"] == "0x0" and receipt["to"].lower() == da.pool
    assert nodes(dsn)["send"][1] == 1  # attempt 1's kept bytes, not a new signature
    assert usdt_balance(a, da, HOLDER) == 100 * USDT and usdt_balance(a, da, da.pool) == 0
    assert packets(a, da) == [] and usdt_balance(b, db, RECIPIENT) == 0
    assert nodes(dsn)["delivery"][0] != "COMPLETED"
